"""The validating admission webhook for MCPServerInterface (``/validate-mcpserverinterfaces``).

The CRD's schema and CEL rules catch wrong shapes; this webhook catches what
needs Lockstep's own code to see, before a bad spec reaches the operator:

* an approved revision whose digests do not match the definitions it carries
  (or whose component digests do not add up to its aggregate digest);
* a digest formula this operator does not know;
* ignore rules that are not valid JSON pointers of a field inside a component;
* a selector that selects no pod by construction (``In`` with no values,
  contradictory requirements on one key, an empty selector).

Every message names the field and says what to do about it. The checks are pure
(:func:`check_interface`); :func:`register_validation` serves them through kopf.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kopf

from lockstep.core import FormulaError, IgnoreRuleError, InterfaceError, parse_ignore_rules
from lockstep.core.digest import ensure_formula
from lockstep.core.names import GROUP, PLURAL, VERSION
from lockstep.core.revision import Revision, RevisionMismatchError
from lockstep.operator.approval_trust import FIRST_SEEN_REFUSED

if TYPE_CHECKING:
    from lockstep.operator.approval_trust import ApprovalTrust

__all__ = ["Checked", "check_interface", "check_signatures", "register_validation", "selector_problems"]

logger = logging.getLogger(__name__)

WEBHOOK_ID = "validate-mcpserverinterfaces"  # kopf serves it at /validate-mcpserverinterfaces
MESSAGE_LIMIT = 4096
REGENERATE = "regenerate the entry with `lockstep approve` or `lockstep snapshot` instead of editing it by hand"


@dataclass
class Checked:
    """The outcome of checking one MCPServerInterface: problems refuse it, warnings only inform."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.problems

    def message(self) -> str:
        count = len(self.problems)
        text = f"MCPServerInterface refused ({count} problem{'s' if count > 1 else ''}): " + "; ".join(self.problems)
        return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def check_interface(body: Mapping[str, Any]) -> Checked:
    """Check a whole MCPServerInterface object (as in an AdmissionReview's ``request.object``)."""
    spec = body.get("spec")
    checked = Checked()
    if not isinstance(spec, Mapping):
        checked.problems.append("spec is missing: add spec.selector and spec.approved")
        return checked
    ignore_ok = _check_ignore(spec.get("ignore"), checked)
    _check_approved(spec.get("approved"), spec.get("ignore") if ignore_ok else None, ignore_ok, checked)
    checked.problems += selector_problems(spec.get("selector"))
    checked.warnings += _selector_warnings(spec.get("selector"))
    return checked


# --------------------------------------------------------------------------- ignore rules

def _check_ignore(rules: Any, checked: Checked) -> bool:
    if rules is None:
        return True
    if not isinstance(rules, list):
        checked.problems.append("spec.ignore must be a list of JSON pointers such as /tools/*/_meta/generatedAt")
        return False
    valid = True
    for index, rule in enumerate(rules):
        try:
            parse_ignore_rules([rule])
        except IgnoreRuleError as error:
            checked.problems.append(f"spec.ignore[{index}]: {error}")
            valid = False
    return valid


# --------------------------------------------------------------------------- approved revisions

def _check_approved(approved: Any, ignore: Any, ignore_ok: bool, checked: Checked) -> None:
    if approved is None:
        return
    if not isinstance(approved, list):
        checked.problems.append("spec.approved must be a list of revisions (digest, formula, components)")
        return
    seen: dict[str, int] = {}
    for index, entry in enumerate(approved):
        where = f"spec.approved[{index}]"
        if not isinstance(entry, Mapping):
            checked.problems.append(f"{where} must be an object with digest and formula; {REGENERATE}")
            continue
        digest = str(entry.get("digest") or "")
        if digest in seen:
            checked.problems.append(f"{where} repeats the digest of spec.approved[{seen[digest]}]; remove one")
        seen.setdefault(digest, index)
        if _formula_problem(entry, where, checked):
            continue
        if not ignore_ok and entry.get("definitions") is not None:
            checked.warnings.append(f"{where}: definitions not checked against the digest until spec.ignore is fixed")
            continue
        _check_revision(entry, ignore or [], where, checked)


def _formula_problem(entry: Mapping[str, Any], where: str, checked: Checked) -> bool:
    formula = entry.get("formula")
    try:
        ensure_formula(str(formula or ""))
    except FormulaError as error:
        checked.problems.append(f"{where}.formula: {error}; approve the revision again with this "
                                "version's `lockstep approve`, or upgrade the operator")
        return True
    return False


def _check_revision(entry: Mapping[str, Any], ignore: Sequence[str], where: str, checked: Checked) -> None:
    try:
        Revision.from_spec(entry, ignore)
    except RevisionMismatchError as error:
        checked.problems.append(f"{where}: {error}: the digests or the definitions were changed after "
                                f"approval; {REGENERATE}")
        return
    except InterfaceError as error:
        checked.problems.append(f"{where}: {error}; {REGENERATE}")
        return
    if entry.get("definitions") is None:
        checked.warnings.append(f"{where} carries digests only: drift against it names the changed "
                                "components but cannot show the changed text")


# --------------------------------------------------------------------------- selector

@dataclass
class _KeyConstraint:
    """What the requirements on one label key demand of a pod."""

    must_exist: list[str] = field(default_factory=list)
    must_not_exist: list[str] = field(default_factory=list)
    allowed: set[str] | None = None  # None: any value
    excluded: set[str] = field(default_factory=set)

    def allow_only(self, values: set[str]) -> None:
        self.allowed = set(values) if self.allowed is None else self.allowed & values


def selector_problems(selector: Any) -> list[str]:
    """Why the label selector selects no pod by construction; empty when some pod could match."""
    if not isinstance(selector, Mapping) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return [("spec.selector is empty, so it selects no pod: give matchLabels (for example app: <your server>) "
                "or matchExpressions")]
    problems: list[str] = []
    constraints: dict[str, _KeyConstraint] = {}
    for key, value in (selector.get("matchLabels") or {}).items():
        constraint = constraints.setdefault(str(key), _KeyConstraint())
        constraint.must_exist.append(f"matchLabels {key}={value}")
        constraint.allow_only({str(value)})
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        problems += _add_expression(index, expression, constraints)
    for key, constraint in constraints.items():
        problem = _contradiction(key, constraint)
        if problem:
            problems.append(f"spec.selector selects no pod: {problem}; remove or correct one of them")
    return problems


def _add_expression(index: int, expression: Any, constraints: dict[str, _KeyConstraint]) -> list[str]:
    where = f"spec.selector.matchExpressions[{index}]"
    if not isinstance(expression, Mapping):
        return [f"{where} must be an object with key, operator and values"]
    key, operator = str(expression.get("key") or ""), expression.get("operator")
    values = {str(value) for value in expression.get("values") or []}
    constraint = constraints.setdefault(key, _KeyConstraint())
    label = f"matchExpressions[{index}] ({key} {operator}{' ' + _listed(values) if values else ''})"
    if operator == "In":
        if not values:
            return [f"{where} ({key} In) has no values, so it selects no pod: list the values of {key} to select"]
        constraint.must_exist.append(label)
        constraint.allow_only(values)
    elif operator == "NotIn":
        if not values:
            return [(f"{where} ({key} NotIn) has no values: list the values of {key} to exclude, "
                    "or use DoesNotExist")]
        constraint.excluded |= values
    elif operator == "Exists":
        constraint.must_exist.append(label)
    elif operator == "DoesNotExist":
        constraint.must_not_exist.append(label)
    else:
        return [f"{where}.operator {operator!r} is unknown: use In, NotIn, Exists or DoesNotExist"]
    return []


def _contradiction(key: str, constraint: _KeyConstraint) -> str:
    if constraint.must_exist and constraint.must_not_exist:
        return (f"label {key} must exist ({constraint.must_exist[0]}) and must not exist "
                f"({constraint.must_not_exist[0]})")
    if constraint.allowed is not None and not constraint.allowed - constraint.excluded:
        demands = ", ".join(constraint.must_exist)
        excluded = f", and not one of {_listed(constraint.excluded)}" if constraint.excluded else ""
        return f"no value of label {key} meets all of: {demands}{excluded}"
    return ""


def _selector_warnings(selector: Any) -> list[str]:
    if not isinstance(selector, Mapping):
        return []
    warnings = []
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        if isinstance(expression, Mapping) and expression.get("operator") in ("Exists", "DoesNotExist") \
                and expression.get("values"):
            warnings.append(f"spec.selector.matchExpressions[{index}]: values are ignored with "
                            f"{expression.get('operator')}; remove them")
    return warnings


def _listed(values: set[str]) -> str:
    return "[" + ", ".join(sorted(values)) + "]"


# --------------------------------------------------------------------------- signed approvals

def check_signatures(body: Mapping[str, Any], trust: ApprovalTrust, checked: Checked) -> None:
    """The MCPApprovalPolicy objects' verdict on the approved revisions, as admission problems and warnings."""
    if not trust.active:
        return
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    spec = body.get("spec") or {}
    entries = spec.get("approved") or []
    decision = trust.decide(namespace, name, entries)
    checked.warnings += [f"signed approvals: {warning}" for warning in decision.warnings]
    for index, entry in enumerate(entries):
        digest = str(entry.get("digest")) if isinstance(entry, Mapping) else "?"
        if not decision.trusts(digest):
            checked.problems.append(f"spec.approved[{index}] ({digest}) is not a trusted signed approval: "
                                    f"{decision.untrusted[digest]}; sign it with `lockstep sign`")
    if spec.get("approval") == "FirstSeen" and not decision.first_seen_allowed:
        checked.problems.append(f"spec.{FIRST_SEEN_REFUSED}")


# --------------------------------------------------------------------------- kopf

def register_validation(registry: kopf.OperatorRegistry, config: Any = None, *, metrics: Any = None,
                        trust: ApprovalTrust | None = None) -> None:
    """Register the MCPServerInterface validating webhook (``/validate-mcpserverinterfaces``) on ``registry``.

    With ``trust`` (the operator's MCPApprovalPolicy objects), approved revisions that an ``Enforce`` scope does
    not trust are refused, each named with what it lacks; under ``Warn`` the same is a warning.

    ``metrics`` (the operator's, optional) counts requests in ``lockstep_webhook_requests_total``
    with ``webhook="validate"`` and ``outcome`` ``allowed`` or ``refused``."""

    @kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, operations=["CREATE", "UPDATE"], registry=registry)
    def validate_interface(body: kopf.Body, warnings: list[str], **_: Any) -> None:
        checked = check_interface(body)
        if trust is not None and checked.allowed:
            check_signatures(body, trust, checked)
        warnings.extend(checked.warnings)
        if metrics is not None:
            metrics.webhook_requests.labels("validate", "allowed" if checked.allowed else "refused").inc()
        if not checked.allowed:
            metadata = body.get("metadata") or {}
            logger.info("Refused MCPServerInterface %s/%s: %s", metadata.get("namespace"), metadata.get("name"),
                        "; ".join(checked.problems))
            raise kopf.AdmissionError(checked.message(), code=422)
