"""Start, wait for and stop a local Triton Inference Server (`tritonserver`) on a model repository.

The binary normally comes from the `nvidia-pytriton` wheel, which ships `tritonserver` 2.51 with the
python backend (see "Serving: facts about Triton here" in docs/architecture.md). Three things make
that binary work outside the pytriton library:

- a backend directory of *symlinks* into the wheel (`prepare_backend_dir`): a copied stub cannot
  find its bundled `libcudart` and the server hangs while loading;
- the current interpreter's `bin/` first on the server's `PATH`: the python backend's stub starts
  Python isolated (`PYTHONPATH` is ignored) and finds its environment through `python3` on `PATH`;
- `--exit-on-error=false`, so a model that fails to load leaves the server up and its reason can be
  read from the repository index instead of scraped from the log.

Security. Triton has no authentication, and serving a repository runs its `model.py` files. So no
client may change what is served: the server runs with `--model-control-mode=none` (the repository
API's load and unload answer 503 "explicit model load / unload is not allowed if polling is
enabled") on a *repository view*, a fresh private folder holding only
symlinks to the model folders to serve, made at each start and removed at stop. Hidden folders
(the staging folders of an interrupted `attndeploy package`) are never served. Every endpoint
binds to loopback unless told otherwise; `exposure_warning` says what a wider address needs.
Triton's admin APIs (system shared memory, the repository index, trace and log settings) answer
only requests that carry a key drawn at each start and never told to clients (`restricted`):
a client that registered the python backend's own region could abort the server. Two single
requests end the bundled 2.51 outright (JSON nested some 35,000 levels deep over HTTP; the
classification extension on a BYTES output), so by default a request guard (`guard`: a small
proxy, checks in `guard_checks`) listens on the asked ports and answers those itself, with
tritonserver behind it on loopback ports of its own.

Clean-up. The server leads its own process group (its python backend stubs inherit it) and gives
the python backend a shared-memory prefix of its own (`attndeploy_<hex>_`). Stopping ends what is
left of that group and removes `/dev/shm/<prefix>*`, even after the server itself was killed
(a stub whose server was SIGKILLed can outlive it, ignoring SIGTERM, and keep its region). A
foreground server gets SIGTERM from Linux when the thread that started it dies
(`PR_SET_PDEATHSIG`), so a killed `attndeploy serve` does not leave a server answering.

`TritonServer` runs one server as a context manager; `start_background` / `stop_background` run one
detached and remember it in a small JSON state file (for `attndeploy serve --background` / `stop`).

Modules: `binary` (finding tritonserver, the backend directory), `ports` (ports and addresses),
`processes` (pids, process groups, shared-memory clean-up), `restricted` (the closed admin APIs),
`guard` and `guard_checks` (the request guard),
`view` (the repository view), `state`
(the background state file), `triton` (`TritonServer`) and `background`. Every name below is
importable from `attndeploy.serving.server` as it was before the split; patch a name in the
submodule that uses it, not here.
"""

from __future__ import annotations

from attndeploy.serving.server.background import start_background, stop_background
from attndeploy.serving.server.binary import ENV_BINARY, find_tritonserver, prepare_backend_dir
from attndeploy.serving.server.binary import _backend_dir_for as _backend_dir_for  # launch.py
from attndeploy.serving.server.ports import (
    exposure_warning,
    free_port,
    free_ports,
    is_loopback_host,
)
from attndeploy.serving.server.processes import SHM_DIR
from attndeploy.serving.server.state import (
    STATE_FILE_NAME,
    STATE_FORMAT,
    STATE_MAX_BYTES,
    default_state_path,
)
from attndeploy.serving.server.triton import LOG_TAIL_LINES, TritonServer, log_tail
from attndeploy.serving.server.view import (
    VIEW_PREFIX,
    make_repository_view,
    remove_repository_view,
)

__all__ = [
    "ENV_BINARY",
    "LOG_TAIL_LINES",
    "SHM_DIR",
    "STATE_FILE_NAME",
    "STATE_FORMAT",
    "STATE_MAX_BYTES",
    "VIEW_PREFIX",
    "TritonServer",
    "default_state_path",
    "exposure_warning",
    "find_tritonserver",
    "free_port",
    "free_ports",
    "is_loopback_host",
    "log_tail",
    "make_repository_view",
    "prepare_backend_dir",
    "remove_repository_view",
    "start_background",
    "stop_background",
]
