"""Which MCPServerInterface selects a pod: one rule for the mutating webhook (``webhooks.resolve_binding``,
on the raw objects it lists) and for the operator (``ClusterCache.selecting``, on its parsed records).

* A pod whose ``lockstep.dev/interface`` annotation names an interface is bound to that one (to none
  when no such interface exists). The annotation may not choose a weaker interface than its labels
  select: every interface whose selector matches the pod and that is stricter on some axis
  (:func:`lockstep.core.enforcement.strictness`) selects it too, which admission refuses and the
  judge calls a conflict (fail closed).
* Without the annotation, every interface whose selector matches the pod's labels selects it (two or
  more is ambiguous at admission and a conflict for the judge).

Pure: the caller says how to read an interface's selector and strictness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lockstep.core.names import INTERFACE_ANNOTATION

__all__ = ["Selection", "is_stricter", "label_selection_applies", "select", "selector_matches"]

T = TypeVar("T")
Strictness = tuple[int, ...]


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector selects these labels; an empty or absent selector selects none."""
    if not selector:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(expression, labels) for expression in selector.get("matchExpressions") or [])


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def is_stricter(mine: Strictness, theirs: Strictness) -> bool:
    """Whether ``mine`` is stricter than ``theirs`` on some axis (enforcement, approval)."""
    return any(a > b for a, b in zip(mine, theirs))


def label_selection_applies(bound: str | None, chosen: Strictness | None, candidate: Strictness) -> bool:
    """Whether an interface whose selector matches a pod's labels selects it: always when the pod names
    none (``bound`` empty); else only when the one it names exists (``chosen``, its strictness) and the
    candidate is stricter than it. The caller excludes the named interface itself."""
    if not bound:
        return True
    return chosen is not None and is_stricter(candidate, chosen)


@dataclass(frozen=True)
class Selection(Generic[T]):
    """What selects one pod."""

    #: The interface the pod's annotation names ("" when it names none).
    named: str
    #: That interface, None when the annotation names none or one that does not exist.
    chosen: T | None
    #: The names of the interfaces whose selector matches the pod's labels, sorted.
    by_labels: tuple[str, ...]
    #: Of those, the ones stricter than ``chosen`` (which then select the pod too), sorted.
    stricter: tuple[str, ...]

    @property
    def selecting(self) -> tuple[str, ...]:
        """Every interface that selects the pod, the named one first; two or more is a conflict."""
        if self.named:
            return (self.named, *self.stricter) if self.chosen is not None else ()
        return self.by_labels


def select(annotations: Mapping[str, str], labels: Mapping[str, str], interfaces: Mapping[str, T], *,
           selector: Callable[[T], Mapping[str, Any] | None], strictness: Callable[[T], Strictness]) -> Selection[T]:
    """The interfaces of ``interfaces`` (by name; at least every one that could select the pod) that select
    a pod with these ``annotations`` and ``labels``."""
    named = annotations.get(INTERFACE_ANNOTATION) or ""  # taken as it is: the API server allows only strings
    by_labels = tuple(sorted(name for name, interface in interfaces.items()
                             if selector_matches(selector(interface), labels)))
    chosen = interfaces.get(named) if named else None
    rank = strictness(chosen) if chosen is not None else None
    stricter = () if not named else tuple(
        name for name in by_labels
        if name != named and label_selection_applies(named, rank, strictness(interfaces[name])))
    return Selection(named, chosen, by_labels, stricter)
