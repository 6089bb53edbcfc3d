"""Properties of the diff: it agrees with the digests, whatever the interface."""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lockstep.core.diff import Change, diff_interfaces, diff_revisions, render_json, render_text
from lockstep.core.digest import digest_interface
from lockstep.core.model import Interface
from lockstep.core.revision import Revision

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)), max_leaves=12)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    tool_names = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    return [{"name": name, "description": draw(st.text(max_size=40)),
             "inputSchema": {"type": "object", "properties": draw(st.dictionaries(
                 st.text(max_size=6), st.fixed_dictionaries({"type": st.sampled_from(["string", "number"])}),
                 max_size=3))},
             **draw(st.dictionaries(st.sampled_from(["title", "annotations", "_meta", "x-extra"]), json_values,
                                    max_size=2))}
            for name in tool_names]


@given(tools(), st.randoms(use_true_random=False))
def test_reordering_is_never_a_finding(items: list[dict[str, Any]], rng: random.Random) -> None:
    shuffled = copy.deepcopy(items)
    rng.shuffle(shuffled)
    shuffled = [dict(reversed(list(item.items()))) for item in shuffled]
    assert diff_interfaces(Interface.from_document({"tools": items}), Interface.from_document({"tools": shuffled})) == []


@given(tools(), st.data())
def test_any_changed_value_is_exactly_one_finding_on_that_tool(items: list[dict[str, Any]], data: st.DataObject) -> None:
    changed = copy.deepcopy(items)
    target = data.draw(st.sampled_from(changed))
    key = data.draw(st.sampled_from(sorted(set(target) - {"name"})))
    new_value = data.draw(json_values.filter(lambda value: value != target[key] or type(value) is not type(
        target[key])))
    target[key] = new_value
    approved, observed = Interface.from_document({"tools": items}), Interface.from_document({"tools": changed})
    findings = diff_interfaces(approved, observed)
    digests_differ = digest_interface(approved).digest != digest_interface(observed).digest
    assert bool(findings) is digests_differ
    if findings:
        [finding] = findings
        assert (finding.name, finding.change, finding.fields) == (target["name"], Change.CHANGED, (key,))
        assert diff_revisions(Revision.of(approved), Revision.of(observed)) == findings
        assert render_text(findings).startswith("~ tool/")
        assert render_json(findings)[0]["fields"] == [key]
