"""tools/image: the post-steps of `make image` on small synthetic OCI archives (the image itself is built
by `make image`, not here): the name containerd imports an archive as, the config check, unpacking with
whiteouts, the pip configuration mounted into the build, and the default image name (the chart's)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from lockstep_testing.chart_render import REPO

from lockstep import __version__

TOOLS = REPO / "tools" / "image"
NAME = f"ghcr.io/lockstep-dev/lockstep:{__version__}"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"image_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oci = load("oci")
pip_mounts = load("pip_mounts")


def tar_bytes(entries: list[tuple[str, bytes | None]]) -> bytes:
    """A layer: (path, content) is a file, (path, None) a folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, content in entries:
            info = tarfile.TarInfo(path)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def make_archive(path: Path, layers: list[list[tuple[str, bytes | None]]], annotations: dict | None = None) -> Path:
    """An OCI image layout in a tar, as `buildah push … oci-archive:` writes one."""
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer_descriptors = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                          **add(gzip.compress(tar_bytes(entries), mtime=0))} for entries in layers]
    config = {"architecture": "amd64", "os": "linux", "config": {
        "User": "65532:65532", "Entrypoint": ["lockstep"], "Cmd": ["--help"], "WorkingDir": "/tmp",
        "Env": ["PATH=/opt/lockstep/bin:/usr/bin:/bin"], "ExposedPorts": {"8443/tcp": {}}}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           **add(json.dumps(config).encode())},
                "layers": layer_descriptors}
    descriptor = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **add(json.dumps(manifest).encode())}
    if annotations:
        descriptor["annotations"] = annotations
    index = {"schemaVersion": 2, "manifests": [descriptor]}
    members = [("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", json.dumps(index).encode()),
               *((f"blobs/sha256/{d.split(':')[1]}", data) for d, data in blobs.items())]
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1700000000
            tar.addfile(info, io.BytesIO(data))
    return path


def read_index(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        return json.load(tar.extractfile("index.json"))


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return make_archive(tmp_path / "app-oci.tar", [[("opt/", None), ("opt/a", b"a")]],
                        annotations={"org.opencontainers.image.ref.name": "latest", "keep": "me"})


def test_name_adds_the_annotation_containerd_imports_by_and_keeps_the_rest(archive: Path) -> None:
    before = members(archive)
    assert oci.main(["name", str(archive), NAME]) == 0
    (descriptor,) = read_index(archive)["manifests"]
    assert descriptor["annotations"] == {"io.containerd.image.name": NAME,
                                         "org.opencontainers.image.ref.name": __version__, "keep": "me"}
    after = members(archive)
    assert after.keys() == before.keys()
    assert all(after[name] == before[name] for name in before if name != "index.json")  # blobs untouched
    assert descriptor["digest"] == json.loads(before["index.json"])["manifests"][0]["digest"]


def test_name_is_deterministic_and_idempotent(tmp_path: Path) -> None:
    one = make_archive(tmp_path / "one.tar", [[("a", b"1")]])
    two = make_archive(tmp_path / "two.tar", [[("a", b"1")]])
    assert oci.set_name(one, NAME) and oci.set_name(two, NAME)
    assert one.read_bytes() == two.read_bytes()
    named = one.read_bytes()
    assert oci.set_name(one, NAME) is False
    assert one.read_bytes() == named


@pytest.mark.parametrize("name", ["lockstep:0.1.0", "ghcr.io/lockstep-dev/lockstep", "ghcr.io/x/y@sha256:ab",
                                  "localhost/lockstep"])
def test_name_refuses_what_the_kubelet_would_not_find(tmp_path: Path, name: str) -> None:
    archive = make_archive(tmp_path / "a.tar", [[("a", b"1")]])
    before = archive.read_bytes()
    assert oci.main(["name", str(archive), name]) == 1
    assert archive.read_bytes() == before


def test_inspect_gives_the_config_the_build_checks(archive: Path) -> None:
    oci.set_name(archive, NAME)
    info = oci.inspect(archive)
    assert (info["name"], info["user"], info["entrypoint"], info["cmd"], info["workdir"]) == (
        NAME, "65532:65532", ["lockstep"], ["--help"], "/tmp")
    assert info["layers"] == 1 and info["layer_file_bytes"] == 1 and info["exposed_ports"] == ["8443/tcp"]


def test_unpack_applies_layers_in_order_with_whiteouts(tmp_path: Path) -> None:
    archive = make_archive(tmp_path / "a.tar", [
        [("etc/", None), ("etc/keep", b"old"), ("etc/gone", b"x"), ("var/", None), ("var/cache/", None),
         ("var/cache/one", b"1"), ("var/cache/two", b"2")],
        [("etc/keep", b"new"), ("etc/.wh.gone", b""), ("var/cache/.wh..wh..opq", b""), ("var/cache/three", b"3")],
    ])
    root = tmp_path / "root"
    oci.unpack(archive, root)
    assert (root / "etc/keep").read_text() == "new"
    assert not (root / "etc/gone").exists() and not (root / "etc/.wh.gone").exists()
    assert sorted(p.name for p in (root / "var/cache").iterdir()) == ["three"]


def test_unpack_refuses_a_path_outside_the_root(tmp_path: Path) -> None:
    archive = make_archive(tmp_path / "a.tar", [[("../escape", b"x")]])
    with pytest.raises(ValueError):
        oci.unpack(archive, tmp_path / "root")
    assert not (tmp_path / "escape").exists()


def test_pip_configuration_merges_with_the_environment_last_and_mounts_what_it_names(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.crt").write_text("")
    listed = "\n".join([
        f"global.cert='{tmp_path / 'ca.crt'}'",
        f"global.extra-index-url='file://{tmp_path / 'pypi' / 'simple'} https://example.org/simple'",
        "global.find-links='/nonexistent/wheels'",
        f":env:.find-links='{tmp_path / 'wheels'}'",
        ":env:.default-timeout='180'",
    ])
    config = pip_mounts.parse_config_list(listed)
    assert config == {"global": {"cert": str(tmp_path / "ca.crt"), "find-links": str(tmp_path / "wheels"),
                                 "default-timeout": "180",
                                 "extra-index-url": f"file://{tmp_path}/pypi/simple https://example.org/simple"}}
    assert pip_mounts.local_paths(config) == sorted([tmp_path / "ca.crt", tmp_path / "pypi", tmp_path / "wheels"])
    rendered = pip_mounts.render(config)
    assert rendered.startswith("[global]\ncert = ") and f"find-links = {tmp_path / 'wheels'}\n" in rendered


def test_the_default_image_name_is_the_charts(tmp_path: Path) -> None:
    """build.sh names the image as the chart pulls it by default: image.repository, tag = appVersion."""
    script = (TOOLS / "build.sh").read_text()
    block = script[script.index('if [ -z "${IMAGE:-}" ]'):]
    block = block[:block.index("\nfi\n") + 4]
    printed = subprocess.run(["bash", "-c", block + 'echo "$IMAGE"'], cwd=REPO, capture_output=True, text=True,
                             check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    values = yaml.safe_load((REPO / "charts/lockstep/values.yaml").read_text())
    chart = yaml.safe_load((REPO / "charts/lockstep/Chart.yaml").read_text())
    assert printed == f"{values['image']['repository']}:{chart['appVersion']}" == NAME
