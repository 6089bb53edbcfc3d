"""What every check of ``lockstep check`` yields (lockstep.cli.check runs them; lockstep.cli.check_approvals is one
of them), and the context they run in."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CheckError", "CheckResult", "Context", "Status"]


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    message: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "status": self.status.value}


class CheckError(Exception):
    """The cluster cannot be reached at all: no check can run (exit 2)."""


@dataclass
class Context:
    api: Any  # kubernetes.client.ApiClient
    release: str
    namespace: str

    @property
    def kubernetes(self) -> Any:
        import kubernetes

        return kubernetes

    def core(self) -> Any:
        return self.kubernetes.client.CoreV1Api(self.api)

    def instance_selector(self) -> str:
        return f"app.kubernetes.io/instance={self.release},app.kubernetes.io/name=lockstep"
