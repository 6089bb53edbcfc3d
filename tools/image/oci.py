#!/usr/bin/env python3
"""Small tools for an OCI image archive (an OCI image layout in a tar), standard library only.

    oci.py name ARCHIVE NAME        give every manifest in index.json the name containerd imports it as
                                    (annotation io.containerd.image.name, and the tag as
                                    org.opencontainers.image.ref.name); rewrites the tar in place
    oci.py inspect ARCHIVE          the image's name, config (user, entrypoint, cmd, env, workdir) and
                                    sizes, as JSON
    oci.py unpack ARCHIVE DIR       the image's root filesystem: its layers applied in order, whiteouts
                                    honoured
    oci.py run [--root DIR] ARCHIVE [ARG...]
                                    unpack into a temporary folder and run the image's entrypoint there
                                    (chroot, the image's user, environment and working directory, as
                                    root on this machine): a smoke check of the archive itself

`buildah push IMAGE oci-archive:FILE` writes no io.containerd.image.name, and containerd (the real
node's `load-image`) names an imported OCI image only from that annotation.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
# Python >= 3.11.4 takes an extraction filter; the layers' paths are checked by unpack() itself.
TRUSTED = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def split_name(name: str) -> tuple[str, str]:
    """`registry/path:tag` → (`registry/path`, `tag`); a digest or a missing tag is refused."""
    repository, _, tag = name.rpartition(":")
    if not repository or "/" in tag or "@" in name:
        raise ValueError(f"{name!r}: give a name with a tag, registry/path:tag")
    if "/" not in repository or "." not in repository.split("/")[0] and ":" not in repository.split("/")[0]:
        raise ValueError(f"{name!r}: give a fully qualified name (registry/path:tag); containerd stores it "
                         f"as written and the kubelet would look for docker.io/…")
    return repository, tag


def name_index(index: dict, name: str) -> dict:
    """index.json with every manifest named `name` (other annotations kept)."""
    _, tag = split_name(name)
    manifests = index.get("manifests") or []
    if not manifests:
        raise ValueError("index.json lists no manifest")
    named = dict(index)
    named["manifests"] = [{**m, "annotations": {**(m.get("annotations") or {}), CONTAINERD_NAME: name,
                                                 REF_NAME: tag}} for m in manifests]
    return named


def index_bytes(index: dict) -> bytes:
    return json.dumps(index, sort_keys=True, separators=(",", ":")).encode()


def set_name(archive: Path, name: str) -> bool:
    """Rewrite `archive` with a named index.json; members, their order and metadata are kept. Returns
    False (and leaves the file alone) when it is already named so."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile(Layout.find(tar, "index.json")))
        named = name_index(index, name)
        if named == index:
            return False
        data = index_bytes(named)
        tmp = archive.with_name(archive.name + ".tmp")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
            for m in tar.getmembers():
                if m.name in ("index.json", "./index.json"):
                    info = tarfile.TarInfo(m.name)
                    info.size, info.mtime, info.mode = len(data), m.mtime, m.mode
                    info.uid, info.gid, info.uname, info.gname = m.uid, m.gid, m.uname, m.gname
                    out.addfile(info, io.BytesIO(data))
                elif m.isfile():
                    out.addfile(m, tar.extractfile(m))
                else:
                    out.addfile(m)
    os.replace(tmp, archive)
    return True


class Layout:
    """An OCI archive's index, manifest and config, and its blobs by digest."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.index = self.json("index.json")
        manifests = self.index.get("manifests") or []
        if len(manifests) != 1:
            raise ValueError(f"expected one manifest in index.json, found {len(manifests)}")
        self.descriptor = manifests[0]
        self.manifest = self.blob_json(self.descriptor["digest"])
        self.config = self.blob_json(self.manifest["config"]["digest"])

    @staticmethod
    def find(tar: tarfile.TarFile, path: str) -> tarfile.TarInfo:
        for name in (path, "./" + path):
            try:
                return tar.getmember(name)
            except KeyError:
                continue
        raise KeyError(path)

    def member(self, path: str) -> tarfile.TarInfo:
        return self.find(self.tar, path)

    def json(self, path: str) -> dict:
        return json.load(self.tar.extractfile(self.member(path)))

    def blob(self, digest: str) -> io.BufferedReader:
        algorithm, _, hexdigest = digest.partition(":")
        return self.tar.extractfile(self.member(f"blobs/{algorithm}/{hexdigest}"))

    def blob_json(self, digest: str) -> dict:
        return json.load(self.blob(digest))

    def layers(self):
        """Each layer as an open tarfile (gzip or not)."""
        for layer in self.manifest["layers"]:
            raw = self.blob(layer["digest"])
            stream = gzip.GzipFile(fileobj=raw) if layer["mediaType"].endswith("gzip") else raw
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                yield tar


def inspect(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        layout = Layout(tar)
        config = layout.config.get("config") or {}
        layer_bytes = 0
        for layer in layout.layers():
            layer_bytes += sum(m.size for m in layer if m.isfile())
        return {
            "name": (layout.descriptor.get("annotations") or {}).get(CONTAINERD_NAME),
            "digest": layout.descriptor["digest"],
            "user": config.get("User", ""),
            "entrypoint": config.get("Entrypoint"),
            "cmd": config.get("Cmd"),
            "env": config.get("Env") or [],
            "workdir": config.get("WorkingDir", ""),
            "exposed_ports": sorted(config.get("ExposedPorts") or {}),
            "layers": len(layout.manifest["layers"]),
            "compressed_bytes": archive.stat().st_size,
            "layer_file_bytes": layer_bytes,  # what the layers hold, uncompressed (files only)
        }


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def unpack(archive: Path, root: Path) -> None:
    """Apply the layers in order under `root`: `.wh.NAME` deletes NAME, `.wh..wh..opq` empties its folder.
    Device nodes are skipped (a container runtime provides /dev)."""
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        for layer in Layout(tar).layers():
            for member in layer:
                path = Path(member.name.removeprefix("./"))
                if path.is_absolute() or ".." in path.parts:
                    raise ValueError(f"unsafe path in a layer: {member.name}")
                base = path.name
                if base == OPAQUE:
                    folder = root / path.parent
                    for child in folder.iterdir() if folder.is_dir() else ():
                        _remove(child)
                    continue
                if base.startswith(WHITEOUT):
                    _remove(root / path.parent / base[len(WHITEOUT):])
                    continue
                if member.isdev():
                    continue
                target = root / path
                if target.exists() or target.is_symlink():
                    if not (member.isdir() and target.is_dir() and not target.is_symlink()):
                        _remove(target)
                layer.extract(member, root, set_attrs=True, numeric_owner=True, **TRUSTED)


def run(archive: Path, args: list[str], root: Path | None = None) -> int:
    """Run the entrypoint (with `args`, or the image's Cmd) in the unpacked image (`root` if given, or a
    temporary folder), as the image's user with the image's environment and working directory."""
    info = inspect(archive)
    with tempfile.TemporaryDirectory(prefix="oci-run-") as tmp:
        if root is None:
            root = Path(tmp) / "rootfs"
            unpack(archive, root)
        command = (info["entrypoint"] or []) + (args or info["cmd"] or [])
        user = info["user"] or "0:0"
        if ":" not in user:
            user += ":" + user
        chroot = ["chroot", f"--userspec={user}", str(root), "/usr/bin/env", "-i", *info["env"]]
        workdir = info["workdir"] or "/"
        shell = f'cd "$1" && shift && exec "$@"'
        return subprocess.run([*chroot, "/bin/sh", "-c", shell, "sh", workdir, *command]).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("name")
    p.add_argument("archive", type=Path)
    p.add_argument("name")
    p = commands.add_parser("inspect")
    p.add_argument("archive", type=Path)
    p = commands.add_parser("unpack")
    p.add_argument("archive", type=Path)
    p.add_argument("root", type=Path)
    p = commands.add_parser("run")
    p.add_argument("--root", type=Path, help="an already unpacked root of the archive")
    p.add_argument("archive", type=Path)
    p.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    try:
        if options.command == "name":
            changed = set_name(options.archive, options.name)
            print(f"{options.archive}: {'named' if changed else 'already named'} {options.name}")
        elif options.command == "inspect":
            print(json.dumps(inspect(options.archive), indent=2))
        elif options.command == "unpack":
            unpack(options.archive, options.root)
        elif options.command == "run":
            args = options.args[1:] if options.args[:1] == ["--"] else options.args
            return run(options.archive, args, options.root)
    except (ValueError, KeyError, OSError, tarfile.TarError) as error:
        print(f"oci.py {options.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
