"""Each field of the page's state is written by one module, its owner; the others call the owner's function
(issue 41: `state.js` `chooseHead`, `chooseToken`, `showError`; `stacks.js` `chooseStack`; ...). A static scan of
frontend/js: every `state.x = ...` (also `app.state.x`, `s.x`, `x += ...`, a part of it, `Object.assign(state, {x})`
and a local name bound to `state.x` whose parts are changed) is a write of `x` by its module."""

from __future__ import annotations

import re
from pathlib import Path

from tests.frontend.test_modules import code_only

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"

# pages of their own, with states of their own: the lessons (lessons/) and the notebook widget, whose answers
# come from Python, so it writes what main.js, controls.js and data.js write on the explorer page
OTHER_PAGES = ("lessons/", "widget.js")

# (module, field): why a second module writes that field
ALLOWED = {
    ("controls.js", "messages"): "a new link: what it leaves out goes back to its default",
    ("controls.js", "stack"): "a new link: what it leaves out goes back to its default",
    ("controls.js", "target"): "a new link: what it leaves out goes back to its default",
    ("controls.js", "sampling"): "a new link: what it leaves out goes back to its default",
}
# modules that write a field named at run time (`state[slot] = ...`), and why
DYNAMIC = {
    "answers.js": "a view's own answers, each in the slot its question names (answers.js ask)",
    "data.js": "a new model drops the answers each view and card lists (its `answers`)",
    "views/patching.js": "its own picks, one field each (PICKS)",
}

STATE = r"(?:\bapp\.state|(?<![\w.$])state|(?<![\w.$])s)"
PART = r"(?:\s*\.\s*\w+|\[[^\]\n]*\])*"
WRITE = r"\s*(?:[-+*/%&|^?]{0,2}=(?!=)|\+\+|--)"
FIELD_WRITE = re.compile(STATE + r"\.(\w+)" + PART + WRITE)
DYNAMIC_WRITE = re.compile(STATE + r"\[[^\]\n]+\]" + PART + WRITE)
ASSIGN = re.compile(r"Object\.assign\(\s*" + STATE + r"\s*,\s*\{([^{}]*)\}")
ALIAS = re.compile(r"\b(?:const|let)\s+(\w+)\s*=\s*" + STATE + r"\.(\w+)\s*[;\n]")


def writes(text: str) -> tuple[set[str], bool]:
    """The fields of the state a module's text writes, and whether it writes one named at run time."""
    code = code_only(text)
    fields = {m.group(1) for m in FIELD_WRITE.finditer(code)}
    for m in ASSIGN.finditer(code):
        fields |= set(re.findall(r"(?:^|,)\s*(\w+)\s*(?=[:,]|$)", m.group(1).strip()))
    for m in ALIAS.finditer(code):
        name, field = m.groups()
        if re.search(rf"(?<![\w.$]){name}\s*(?:\.\s*\w+|\[[^\]\n]*\])+{WRITE}", code):
            fields.add(field)
    return fields, bool(DYNAMIC_WRITE.search(code))


def test_writes_finds_each_kind_of_write_and_no_read():
    text = (
        "function f(app, state, s) {\n  state.a = 1;\n  app.state.b += 2;\n  s.c.d = 3;\n  state.e[0] = 4;\n"
        "  Object.assign(state, { g: 1, h });\n  const v = state.i;\n  v.j = 5;\n  const w = state.k;\n"
        "  if (state.l === 1 || state.m >= 2 || w.n) other.state.o = 6;\n  state.p++;\n"
        "  const t = `state.q = ${state.r}`; // state.s = 1\n}\n"
    )
    assert writes(text) == ({"a", "b", "c", "e", "g", "h", "i", "p"}, False)
    assert writes("state[slot] = held;\n") == (set(), True)


def written_by() -> tuple[dict[str, set[str]], set[str]]:
    """Each field and the modules that write it; the modules that write a field named at run time."""
    fields: dict[str, set[str]] = {}
    dynamic = set()
    for path in sorted(JS.rglob("*.js")):
        module = path.relative_to(JS).as_posix()
        if module.startswith(OTHER_PAGES):
            continue
        found, by_name = writes(path.read_text(encoding="utf-8"))
        for field in found:
            fields.setdefault(field, set()).add(module)
        if by_name:
            dynamic.add(module)
    return fields, dynamic


def test_each_state_field_is_written_by_one_module():
    fields, dynamic = written_by()
    assert len(fields) > 40  # the scan reads the page: every view's slice and the shared fields
    shared = {f: sorted(m for m in ms if (m, f) not in ALLOWED) for f, ms in fields.items()}
    assert {f: ms for f, ms in shared.items() if len(ms) > 1} == {}
    # each exception still holds (its second writer is still there), and is the only one
    assert all(module in fields.get(field, set()) for module, field in ALLOWED), ALLOWED
    assert dynamic == set(DYNAMIC)


def test_the_shared_choices_are_written_by_their_owners():
    """The issue's cases: the head, the token, the banner, the stack and the switched-off heads, the zoom."""
    fields, _ = written_by()
    owners = {"layer": "state.js", "head": "state.js", "position": "state.js", "notice": "state.js",
              "error": "state.js", "requestErrors": "state.js", "refusal": "state.js", "stack": "stacks.js",
              "ablate": "switchedoff.js", "zoom": "draw/zoom.js", "drawCells": "data.js", "role": "views/roles.js",
              "imageExpanded": "views/image.js", "imageQuery": "views/image.js", "implicitHead": "head/implicit.js"}
    found = {f: sorted(m for m in fields.get(f, ()) if (m, f) not in ALLOWED) for f in owners}
    assert found == {f: [m] for f, m in owners.items()}
