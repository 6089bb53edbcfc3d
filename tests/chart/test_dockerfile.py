"""The Dockerfile, checked without a container engine: a pinned slim base that `make image` swaps for a
Debian one, a wheel built and installed into a venv in one stage and only that venv copied to the other,
a numeric non-root user, the `lockstep` console script as entrypoint, and
a build context (after .dockerignore) that really builds a wheel holding every runtime dependency."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

import pytest
from lockstep.operator.injection import NONROOT_ID
from lockstep_testing.chart_render import REPO, Render

DOCKERFILE = REPO / "Dockerfile"
BUILD_SCRIPT = REPO / "tools" / "image" / "build.sh"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|make|build-essential|python3?-dev|libc6-dev|cargo|rustc)\b")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their instructions; line continuations joined, global ARG defaults substituted."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in (l.strip() for l in lines):
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages and "=" in rest:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], base.strip())
            stages.append(Stage(base, name.strip()))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_two_stages_on_a_slim_python_pinned_by_full_version(stages: list[Stage]) -> None:
    assert len(stages) == 2
    for stage in stages:
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", stage.base), stage.base
    minimum = tuple(int(x) for x in re.findall(r"\d+", PYPROJECT["project"]["requires-python"]))
    assert tuple(int(x) for x in re.findall(r"\d+", stages[-1].base)[:2]) >= minimum[:2]


def test_both_stages_take_the_base_from_the_build_argument_make_image_sets() -> None:
    """`make image` replaces the base of both stages with one made from Debian's packages; the runtime
    copies the build stage's /etc/passwd, so the two must stay one base."""
    froms = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    assert re.search(r"^ARG PYTHON_IMAGE=", DOCKERFILE.read_text(), re.MULTILINE)
    assert '--build-arg PYTHON_IMAGE="$BASE_IMAGE"' in BUILD_SCRIPT.read_text()
    assert "-f Dockerfile" in BUILD_SCRIPT.read_text()


def test_every_step_runs_on_both_bases(stages: list[Stage]) -> None:
    """Debian's own python3 has no `python` or `pip` command and refuses pip installs outside a venv
    (PEP 668): steps call python3 and pip through venvs only."""
    for stage in stages:
        for run in stage.all("RUN"):
            assert not re.search(r"(^|[\s;&|(])(python|pip|pip3)\s", run), run
            for pip in re.findall(r"(\S*pip)\s+(?:--python \S+ )?install", run):
                assert pip.startswith("/opt/build/bin/"), run


def test_the_first_stage_builds_a_wheel_and_installs_it_into_the_runtime_venv(stages: list[Stage]) -> None:
    runs = stages[0].all("RUN")
    assert any("-m build --wheel --outdir /dist" in run for run in runs)
    into_runtime = [m for run in runs for m in re.findall(r"--python /opt/lockstep/bin/python install ([^&;]+)", run)]
    assert into_runtime, "nothing is installed into /opt/lockstep"
    for install in into_runtime:
        words = [w for w in install.split() if w != "--no-cache-dir"]
        assert words in (["/dist/*.whl"], ["-r", "/tmp/requirements.txt"]), install
    # the `build` package goes into the build venv only
    assert all("/opt/lockstep" not in m for run in runs for m in re.findall(r"install [^&;]*build>=", run))


def test_the_dependencies_installed_before_the_code_are_the_projects(stages: list[Stage]) -> None:
    """The layer of dependencies, cached across code changes, comes from pyproject.toml alone: its
    one-liner, run here, must print exactly the project's dependencies."""
    (snippet,) = [m for run in stages[0].all("RUN") for m in re.findall(r"python3 -c '([^']+)'", run)]
    printed = subprocess.run([sys.executable, "-c", snippet], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert printed == PYPROJECT["project"]["dependencies"]


def test_the_final_stage_copies_only_the_venv_and_the_user_and_runs_nothing(stages: list[Stage]) -> None:
    final = stages[-1]
    assert not final.all("RUN"), "a RUN in the final stage would also see make image's build-time mounts"
    copies = final.all("COPY")
    assert sorted(copies) == sorted([f"--from={stages[0].name} /etc/passwd /etc/group /etc/",
                                     f"--from={stages[0].name} /opt/lockstep /opt/lockstep"]), copies
    (env,) = final.all("ENV")
    assert re.search(r"\bPATH=/opt/lockstep/bin:\$PATH\b", env), env
    assert not BUILD_TOOLS.search(" ".join(arg for _, arg in final.instructions))


def test_the_final_stage_runs_as_the_numeric_non_root_user_the_sidecar_and_chart_expect(stages: list[Stage], render: Render) -> None:
    users = stages[-1].all("USER")
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit() and int(gid) != 0)
    assert int(uid) == NONROOT_ID  # the injected sidecar's runAsUser
    deployment = next(o for o in render() if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    useradd = " ".join(stages[0].all("RUN"))
    assert f"--uid {uid} " in useradd and f"--gid {gid or uid} " in useradd  # its /etc/passwd entry
    last_user = max(i for i, (kw, _) in enumerate(stages[-1].instructions) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in stages[-1].instructions[last_user:]), "RUN after USER would run as non-root"


def test_the_entrypoint_is_the_lockstep_console_script(stages: list[Stage]) -> None:
    (entrypoint,) = stages[-1].all("ENTRYPOINT")
    assert entrypoint == '["lockstep"]'
    assert PYPROJECT["project"]["scripts"]["lockstep"] == "lockstep.cli:main"


def dockerignore_allows(path: str, rules: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern that matches a folder covers its files."""
    allowed = True
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        pattern = pattern.rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, pattern) or fnmatch.fnmatchcase(prefix, pattern.replace("**/", ""))
               for prefix in prefixes):
            allowed = negate
    return allowed


def build_context(tmp_path: Path) -> Path:
    rules = [r.strip() for r in (REPO / ".dockerignore").read_text().splitlines()
             if r.strip() and not r.startswith("#")]
    context = tmp_path / "context"
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    for path in tracked:
        if dockerignore_allows(path, rules) and (REPO / path).is_file():
            (context / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, context / path)
    return context


def test_the_build_context_holds_what_the_copies_need_and_no_tests(tmp_path: Path, stages: list[Stage]) -> None:
    context = build_context(tmp_path)
    for copy in stages[0].all("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            assert (context / source).exists(), f"COPY {source}: excluded by .dockerignore or missing"
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        assert (context / package.replace(".", "/") / "__init__.py").exists(), package
    assert not (context / "tests").exists() and not (context / ".venv").exists()


@pytest.mark.slow
def test_the_build_context_builds_a_wheel_with_every_runtime_dependency(tmp_path: Path) -> None:
    context = build_context(tmp_path)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                    str(context)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
                                     .decode())
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    required = {re.split(r"[<>=!~; \[]", r, maxsplit=1)[0].lower() for r in metadata.get_all("Requires-Dist", [])
                if "extra ==" not in r}
    declared = {re.split(r"[<>=!~; \[]", d, maxsplit=1)[0].lower() for d in PYPROJECT["project"]["dependencies"]}
    assert required == declared
    assert "lockstep = lockstep.cli:main" in entry_points
    assert {"lockstep/operator/cli.py", "lockstep/sidecar/cli.py", "lockstep/cli/__init__.py"} <= set(names)
