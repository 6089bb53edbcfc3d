"""The proxy always knows the verdict (issue 32, S6-7, N4): the sidecar isolates itself on a refusal that says
the operator holds no True verdict (403, 404), when no True answer came within staleAfter (a driven clock), and
in Quarantine an answer without ``approved`` withholds everything."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockstep_testing.loopback import Certificates, McpServerHandle, OperatorStandIn, sidecar_env
from lockstep_testing.mcp_servers import MutableServer, make_tools
from lockstep_testing.polling import eventually
from lockstep_testing.proxy_support import agent_read

from lockstep import reader
from lockstep.core import digest_interface
from lockstep.core.gate import ComponentGate
from lockstep.core.ignore import IgnoreRules
from lockstep.core.model import ComponentKind
from lockstep.core.wire import AnswerError, AnswerVerdict, ApprovedComponents, ReportAnswer
from lockstep.demo.control_plane import free_port
from lockstep.proxy.app import ProxyApp
from lockstep.sidecar.app import RunningSidecar, running_sidecar
from lockstep.sidecar.settings import SidecarSettings
from lockstep.sidecar.verdict import VerdictKeeper


class Clock:
    """Monotonic seconds the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def mcp_server() -> MutableServer:
    return MutableServer(tools=make_tools(2))


async def approve_served(mcp: McpServerHandle, operator: OperatorStandIn) -> None:
    digest = digest_interface((await reader.read_interface(mcp.url)).interface)
    operator.approved = {"ignore": [], "components": [c.to_dict() for c in digest.components]}


def proxy_url(sidecar: RunningSidecar) -> str:
    assert sidecar.proxy is not None
    return f"http://127.0.0.1:{sidecar.proxy.listen_port}/mcp"


def settings(mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path,
             mode: str) -> SidecarSettings:
    return SidecarSettings.from_env(sidecar_env(mcp.url, operator.url, certificates.ca_pem, token_file,
                                                LOCKSTEP_PROXY_PORT=str(free_port()), LOCKSTEP_PROXY_MODE=mode))


async def verified(sidecar: RunningSidecar) -> None:
    assert sidecar.proxy is not None
    await eventually(lambda: sidecar.reporter.last_delivery and sidecar.proxy.isolated is None,  # type: ignore[union-attr]
                     what="the first True answer")


@pytest.mark.parametrize("status", [403, 404])
async def test_a_report_refused_as_not_selected_or_unknown_isolates_the_proxy(
        mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path,
        status: int) -> None:
    """403 NotSelected is what the operator answers once no interface selects the pod (it has written False);
    404 UnknownPod once it does not know the pod. Either way no True verdict stands."""
    await approve_served(mcp, operator)
    async with running_sidecar(settings(mcp, operator, certificates, token_file, "isolate"), host="127.0.0.1",
                               max_report_backoff=0.5) as sidecar:
        await verified(sidecar)
        assert [tool.name for tool in (await agent_read(proxy_url(sidecar))).tools] == ["tool_0", "tool_1"]
        operator.answers = [status] * 1000
        sidecar.reporter.resubmit()
        await eventually(lambda: sidecar.proxy.isolated, what="the proxy to isolate itself")  # type: ignore[union-attr]
        with pytest.raises(Exception, match="isolated by Lockstep"):
            await agent_read(proxy_url(sidecar), call="tool_0")
    assert "tool_0" not in mcp.server.tool_calls


async def test_no_true_answer_within_stale_after_isolates_and_the_next_one_releases(
        mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    await approve_served(mcp, operator)
    clock = Clock()
    async with running_sidecar(settings(mcp, operator, certificates, token_file, "isolate"), host="127.0.0.1",
                               max_report_backoff=0.5, clock=clock) as sidecar:
        await verified(sidecar)
        keeper = sidecar.keeper
        assert keeper is not None and keeper.deadline is not None
        clock.now = keeper.deadline - 0.001
        keeper.check()
        assert sidecar.proxy is not None and sidecar.proxy.isolated is None
        clock.now = keeper.deadline  # the operator's reports stop getting through (a partition): nothing more
        await eventually(lambda: sidecar.proxy.isolated == "ReportStale",  # type: ignore[union-attr]
                         what="the deadline task to isolate the proxy")
        with pytest.raises(Exception, match="isolated by Lockstep"):
            await agent_read(proxy_url(sidecar))
        sidecar.reporter.resubmit()  # the operator answers True again
        await eventually(lambda: sidecar.proxy.isolated is None, what="the next True to release it")  # type: ignore[union-attr]


async def test_an_answer_without_approved_withholds_everything_in_quarantine(
        mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    """None or several interfaces select the pod: the operator answers without ``approved``, and the proxy must
    not keep the previous interface's gate."""
    await approve_served(mcp, operator)
    async with running_sidecar(settings(mcp, operator, certificates, token_file, "quarantine"), host="127.0.0.1",
                               max_report_backoff=0.5) as sidecar:
        await eventually(lambda: sidecar.reporter.last_delivery, what="the first answer")
        assert [tool.name for tool in (await agent_read(proxy_url(sidecar))).tools] == ["tool_0", "tool_1"]
        first = sidecar.reporter.last_delivery
        operator.approved = None
        sidecar.reporter.resubmit()
        await eventually(lambda: sidecar.reporter.last_delivery is not first, what="the next answer")
        assert (await agent_read(proxy_url(sidecar))).tools == []


def keeper(isolating: bool = True) -> tuple[VerdictKeeper, ProxyApp, Clock]:
    proxy = ProxyApp("http://127.0.0.1:1/mcp", ComponentGate({}, IgnoreRules()))
    clock = Clock()
    return VerdictKeeper(proxy, isolating=isolating, stale_after=180.0, clock=clock), proxy, clock


def test_isolate_starts_isolated_and_keeps_the_stale_after_the_operator_names() -> None:
    kept, proxy, clock = keeper()
    assert proxy.isolated == "NoVerdict"
    kept.answered(ReportAnswer(AnswerVerdict("True", "Verified"), approved=ApprovedComponents(), stale_after=5.0))
    assert proxy.isolated is None and kept.deadline == clock.now + 5.0
    clock.now += 4.999
    kept.check()
    assert proxy.isolated is None
    clock.now += 0.001
    kept.check()
    assert proxy.isolated == "ReportStale"


def test_a_watch_notice_of_true_does_not_renew_the_deadline_nor_release_a_stale_proxy() -> None:
    from lockstep.core.wire import VerdictNotice

    kept, proxy, clock = keeper()
    kept.answered(ReportAnswer(AnswerVerdict("True", "Verified"), approved=ApprovedComponents(), stale_after=5.0))
    clock.now += 5.0
    kept.check()
    kept.noticed(VerdictNotice(AnswerVerdict("True", "Verified"), ApprovedComponents(), "e1"))
    assert proxy.isolated == "ReportStale"


def test_a_false_answer_isolates_with_its_reason_word_only() -> None:
    kept, proxy, _ = keeper()
    kept.answered(ReportAnswer(AnswerVerdict("True", "Verified"), approved=ApprovedComponents()))
    kept.answered(ReportAnswer(AnswerVerdict("False", "InterfaceChanged", "tool/<IMPORTANT> changed"),
                               approved=ApprovedComponents()))
    assert proxy.isolated == "InterfaceChanged"


def test_stale_after_crosses_the_wire_and_a_bad_one_is_refused() -> None:
    answer = ReportAnswer(AnswerVerdict("True", "Verified"), stale_after=90.0)
    assert ReportAnswer.from_dict(answer.to_dict()) == answer
    assert ReportAnswer.from_dict({"verdict": {"status": "True", "reason": "Verified"}}).stale_after is None
    for bad in (0, -1, "90s", True, float("inf")):
        with pytest.raises(AnswerError, match="staleAfter"):
            ReportAnswer.from_dict({"verdict": {"status": "True", "reason": "Verified"}, "staleAfter": bad})


def test_quarantine_keeps_serving_what_is_approved_while_the_operator_answers_and_withholds_all_once_it_does_not(
        ) -> None:
    kept, proxy, clock = keeper(isolating=False)
    approved = ApprovedComponents.from_dict({"components": [
        {"kind": "tool", "name": "get_forecast", "digest": "sha256:" + "a" * 64}]})
    kept.answered(ReportAnswer(AnswerVerdict("False", "InterfaceChanged"), approved=approved, stale_after=5.0))
    def passes() -> tuple[str, ...]:
        return proxy.policy.gate.approved_digests(ComponentKind.TOOL, "get_forecast")

    assert proxy.isolated is None and passes() == ("sha256:" + "a" * 64,)
    clock.now += 4.9
    kept.answered(ReportAnswer(AnswerVerdict("False", "InterfaceChanged"), approved=approved, stale_after=5.0))
    clock.now += 4.9  # a False renews the deadline too: the operator is judging
    kept.check()
    assert passes()
    clock.now += 0.1
    kept.check()
    assert proxy.isolated is None and passes() == ()  # Quarantine never isolates: it withholds everything


def test_a_verdict_notice_crosses_the_wire_and_a_bad_one_is_refused() -> None:
    from lockstep.core.wire import VerdictNotice

    notice = VerdictNotice(AnswerVerdict("False", "NotApproved", "x"), ApprovedComponents(), "0" * 32)
    assert VerdictNotice.from_dict(notice.to_dict()) == notice
    assert VerdictNotice.from_dict({**notice.to_dict(), "approved": None}).approved is None
    for bad in ({"verdict": notice.verdict.to_dict()}, {**notice.to_dict(), "etag": "x" * 129},
                {**notice.to_dict(), "approved": {"components": "all"}}):
        with pytest.raises(AnswerError):
            VerdictNotice.from_dict(bad)
