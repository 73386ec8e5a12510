"""`deploy kubernetes` on an image model: its `NAME_image` decodes PNG and JPEG with Pillow, so
the python flavour's server image installs `pillow`, and a server image the user names is told
it needs it (as a WordPiece text model's `tokenizers`)."""

from __future__ import annotations

from pathlib import Path

from attndeploy.deploy import KubernetesOptions, deploy_kubernetes
from attndeploy.deploy.kubernetes import SERVER_DOCKERFILE, server_packages
from attndeploy.deploy.options import SERVER_PACKAGES
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.families.image_classification.images import image_export, write_folder


def _image_repo(tmp_path: Path) -> Path:
    write_folder(tmp_path / "images", per_class=2)
    _, export = image_export(tmp_path / "images", tmp_path)
    package_model(export, tmp_path / "repo", PackageOptions(name="v"))
    return tmp_path / "repo"


def test_an_image_model_needs_pillow_in_the_server_image(tmp_path: Path) -> None:
    repo = _image_repo(tmp_path)
    assert server_packages(repo, ["v", "v_image"]) == {"v_image": ("image", "pillow")}
    result = deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions())
    assert sorted(result.models) == ["v", "v_image"] and result.warnings == []
    dockerfile = (tmp_path / "out" / SERVER_DOCKERFILE).read_text()
    assert f'"pillow~={SERVER_PACKAGES["pillow"]}.0"' in dockerfile
    assert "pillow" in result.image


def test_a_named_server_image_is_told_to_have_pillow(tmp_path: Path) -> None:
    image = "registry.example.com/ml/my-triton:1"
    result = deploy_kubernetes(_image_repo(tmp_path), tmp_path / "out",
                               KubernetesOptions(server_image=image))
    (warning,) = result.warnings
    assert warning.startswith("v_image: its image decoding needs the Python package 'pillow'")
    assert f"--server-image {image} must have it installed" in warning
