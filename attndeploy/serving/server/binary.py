"""Find the `tritonserver` binary and build the python backend's directory of symlinks."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from attndeploy.errors import ServerError

ENV_BINARY = "ATTNDEPLOY_TRITONSERVER"
_INSTALL_HINT = (
    "install it with `pip install 'attndeploy[serve]'` (or `pip install nvidia-pytriton`), "
    f"or point --tritonserver / the {ENV_BINARY} environment variable at a tritonserver binary"
)


# --------------------------------------------------------------------------- locating the binary


def _pytriton_server_dir() -> Path | None:
    """`<site-packages>/pytriton/tritonserver` of the installed wheel (pytriton is not imported)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "tritonserver"
        if candidate.is_dir():
            return candidate
    return None


def _check_executable(path: Path, source: str) -> Path:
    if not path.is_file():
        raise ServerError(f"tritonserver not found at {path} (from {source}); {_INSTALL_HINT}.")
    if not os.access(path, os.X_OK):
        raise ServerError(f"{path} (from {source}) is not executable; run `chmod +x {path}`.")
    return path


def find_tritonserver(explicit: str | Path | None = None) -> Path:
    """Path of the `tritonserver` binary to run.

    Order: `explicit`, the `ATTNDEPLOY_TRITONSERVER` environment variable, `tritonserver` on
    `PATH`, then the binary inside the installed `nvidia-pytriton` wheel. An explicit path or
    environment variable that does not point at an executable is an error, never skipped.
    """
    if explicit is not None:
        return _check_executable(Path(explicit).expanduser(), "the explicit binary argument")
    from_env = os.environ.get(ENV_BINARY)
    if from_env:
        return _check_executable(Path(from_env).expanduser(), f"${ENV_BINARY}")
    on_path = shutil.which("tritonserver")
    if on_path:
        return Path(on_path)
    server_dir = _pytriton_server_dir()
    if server_dir is not None:
        return _check_executable(server_dir / "bin" / "tritonserver", "the nvidia-pytriton wheel")
    raise ServerError(f"No tritonserver binary found; {_INSTALL_HINT}.")


# --------------------------------------------------------------------------- backend directory


def _link(target: Path, link: Path) -> None:
    """Make `link` a symlink to `target`, replacing whatever is there atomically."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def prepare_backend_dir(root: Path) -> Path:
    """Build `<root>/python/` from symlinks into the nvidia-pytriton wheel; return `root`.

    The links are `libtriton_python.so`, `triton_python_backend_utils.py` and the
    `triton_python_backend_stub` built for the running Python (`python_backend_stubs/3.x/`).
    They must be symlinks: a copied stub cannot find its bundled libcudart and the server hangs.
    Pass the returned directory as `--backend-directory`. Safe to call again (idempotent).
    """
    server_dir = _pytriton_server_dir()
    if server_dir is None:
        raise ServerError(
            f"The python backend comes from the nvidia-pytriton wheel; {_INSTALL_HINT}."
        )
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend = server_dir / "backends" / "python"
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    targets = [backend / "libtriton_python.so", backend / "triton_python_backend_utils.py", stub]
    for target in targets:
        if not target.is_file():
            raise ServerError(
                f"{target} is missing from the nvidia-pytriton wheel (Python {version}); "
                "reinstall it with `pip install --force-reinstall nvidia-pytriton` or use a "
                "Python version it ships a stub for."
            )
    python_dir = Path(root) / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for target in targets:
        _link(target, python_dir / target.name)
    return Path(root)


def _default_backend_root() -> Path:
    """A per-wheel, per-Python cache folder shared by every server started from this environment."""
    server_dir = _pytriton_server_dir()
    key = hashlib.sha1(str(server_dir).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache / "attndeploy" / "triton-backends" / f"{key}-py{version}"


def _backend_dir_for(binary: Path) -> Path | None:
    """The `--backend-directory` for `binary`: linked from the wheel, or the install's own."""
    server_dir = _pytriton_server_dir()
    if server_dir is not None and binary.resolve().is_relative_to(server_dir.resolve()):
        return prepare_backend_dir(_default_backend_root())
    own = binary.resolve().parent.parent / "backends"  # a full install: /opt/tritonserver/...
    return own if own.is_dir() else None
