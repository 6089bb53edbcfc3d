"""Benchmark: what a signed approval costs the operator (issue 33 item 6).

Run it with ``python bench/signed_approval.py`` (``--runs N``, ``--keys K``). It approves the interface of
``bench/digest.py`` (1,000 tools, 100 prompts, 200 resources: 1,300 components) with a statement signed by K
approver keys (Ed25519, and ECDSA P-256 for comparison), then times, median of N runs:

- ``verify_approved``: what the operator and the webhook do once per change of a resource or a policy (parse the
  revision's 1,300 component digests, decode the envelope, check K signatures, compare the statement with the
  revision);
- ``Revision.from_spec`` alone: the part of that the operator already did before signed approvals existed;
- ``digest_interface`` of the same interface: what the sidecar's report of it costs to digest, for scale.

Verification never runs per report: a report is judged against the policy computed when the resource last
changed (``ApprovalTrust.judged``); ``bench/operator.py`` measures the operator's CPU per report.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from collections.abc import Callable

from scripts import load_script
from tables import print_table

from lockstep.core import Interface, digest_interface
from lockstep.core.approver_keys import KeyKind, generate_key, signer_of_pem
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import ATTESTATION_FIELD, ApprovalStatement, SignedApproval
from lockstep.core.trust_policy import TrustPolicy, verify_approved

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)


def median_ms(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keys", type=int, default=2, help="approvers who signed (the threshold)")
    args = parser.parse_args()
    interface = Interface.from_document(load_script("digest").build_document())
    revision = Revision.of(interface)
    components = len(revision.digest.components)
    rows = []
    baseline = None
    for kind in (KeyKind.ED25519, KeyKind.ECDSA_P256):
        pairs = [generate_key(kind) for _ in range(args.keys)]
        policy = TrustPolicy.from_spec("bench", {"threshold": args.keys, "keys": [
            {"name": f"approver-{index}", "publicKey": pair.public_pem.decode()} for index, pair in enumerate(pairs)]})
        statement = ApprovalStatement.of(revision, "agents", "weather", 1, NOW + datetime.timedelta(days=30))
        signed = SignedApproval.create(statement, signer_of_pem(pairs[0].private_pem))
        for pair in pairs[1:]:
            signed = signed.add_signature(signer_of_pem(pair.private_pem))
        entry = {**revision.digest.to_dict(), ATTESTATION_FIELD: signed.to_dict()}
        plain = revision.digest.to_dict()
        assert verify_approved([entry], "agents", "weather", policy, NOW).checks[0].trusted
        verify = median_ms(lambda: verify_approved([entry], "agents", "weather", policy, NOW), args.runs)
        parse = median_ms(lambda: Revision.from_spec(plain), args.runs)
        baseline = baseline if baseline is not None else median_ms(lambda: digest_interface(interface), args.runs)
        rows.append((f"{kind.value}, {args.keys} of {args.keys}", f"{verify:.2f}", f"{parse:.2f}",
                     f"{verify - parse:.2f}", f"{verify / baseline:.2f}x"))
    print(f"signed approval of one revision: {components} components, {len(entry[ATTESTATION_FIELD]['payload'])} "
          f"bytes of base64 statement; median of {args.runs} runs; digest_interface of the interface "
          f"{baseline:.1f} ms")
    print_table(("keys", "verify_approved ms", "Revision.from_spec ms", "added by signatures ms",
                 "verify / digest_interface"), rows)


if __name__ == "__main__":
    main()
