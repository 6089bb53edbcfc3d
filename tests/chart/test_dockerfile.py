"""The Dockerfile, checked without a container engine: a pinned slim base, a wheel built in one stage and
installed alone in the other, a numeric non-root user, the `lockstep` console script as entrypoint, and
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


def test_the_first_stage_builds_a_wheel(stages: list[Stage]) -> None:
    assert any("-m build --wheel" in run for run in stages[0].all("RUN"))


def test_the_final_stage_installs_only_the_wheel_and_no_build_tools(stages: list[Stage]) -> None:
    final = stages[-1]
    copies = final.all("COPY")
    assert copies and all(c.startswith(f"--from={stages[0].name} ") and ".whl" in c for c in copies), copies
    runs = " ".join(final.all("RUN"))
    installs = re.findall(r"pip install ([^&;]+)", runs)
    assert installs, "the final stage must pip install the wheel"
    for install in installs:
        targets = [t for t in install.split() if not t.startswith("-")]
        assert targets and all(t.endswith(".whl") for t in targets), install
    assert "apt-get install" not in runs and not BUILD_TOOLS.search(runs)


def test_the_final_stage_runs_as_the_numeric_non_root_user_the_sidecar_and_chart_expect(stages: list[Stage], render: Render) -> None:
    users = stages[-1].all("USER")
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit() and int(gid) != 0)
    assert int(uid) == NONROOT_ID  # the injected sidecar's runAsUser
    deployment = next(o for o in render() if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
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
