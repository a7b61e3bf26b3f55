"""The page's ES modules link: every relative import names a module that exists, and every name it
imports is one that module exports (a moved function otherwise breaks the page only in a browser)."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parents[2] / "frontend" / "js"
IMPORT = re.compile(r"import\s*\{([^}]*)\}\s*from\s*[\"'](\.[^\"']+)[\"']", re.S)


def exported(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    names = set(re.findall(r"^export (?:async )?(?:const|function|let|class) (\w+)", text, re.M))
    for group in re.findall(r"^export \{([^}]*)\}", text, re.M):
        names |= {n.strip().split(" as ")[-1] for n in group.split(",") if n.strip()}
    return names


def test_every_named_import_is_exported_by_its_module():
    modules = sorted(JS.rglob("*.js"))
    assert len(modules) > 20
    exports = {p.resolve(): exported(p) for p in modules}
    wrong = []
    for path in modules:
        for names, source in IMPORT.findall(path.read_text(encoding="utf-8")):
            target = (path.parent / source).resolve()
            if target not in exports:
                wrong.append(f"{path.relative_to(JS)}: no module {source}")
                continue
            for name in (n.strip().split(" as ")[0].strip() for n in names.split(",")):
                if name and name not in exports[target]:
                    wrong.append(f"{path.relative_to(JS)}: {source} exports no {name}")
    assert not wrong, wrong


# The house's limit: at most two JavaScript functions over 80 lines (issue 31, item 6).
LONG_FUNCTION_LINES = 80
LONG_FUNCTIONS_ALLOWED = 2
KEYWORDS = {"if", "for", "while", "switch", "catch", "with", "function", "return"}
REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {""}
REGEX_WORDS = {"return", "typeof", "case", "in", "of", "void", "delete", "throw", "yield", "await"}


def code_only(text: str) -> str:
    """The text with comments, strings, template-literal text and regular expressions blanked to
    spaces (newlines kept, so offsets and line numbers stay); `${...}` inside a template stays code."""
    out = list(text)
    i, n = 0, len(text)
    templates: list[int] = []  # brace depth at each open `${`
    depth = 0
    prev = ""  # the last character of code before i, blanks aside (a closing quote after a string)

    def word_before(i: int) -> str:
        m = re.search(r"(\w+)\s*$", text[max(0, i - 20):i])
        return m.group(1) if m else ""

    def blank(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    def template_text(i: int) -> int:
        """Blank template text from i to its closing backtick or `${`; return the index after."""
        start = i
        while i < n and text[i] != "`" and not text.startswith("${", i):
            i += 2 if text[i] == "\\" else 1
        blank(start, i)
        if i < n and text[i] == "`":
            return i + 1
        templates.append(depth)
        return i + 2

    while i < n:
        c = text[i]
        if not c.isspace() and not text.startswith(("//", "/*"), i):
            before, prev = prev, c
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2) + 2
            blank(i, j)
            i = j
        elif c in "'\"":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "`":
            i = template_text(i + 1)
            prev = "`"
        elif c == "/" and (before in REGEX_AFTER or word_before(i) in REGEX_WORDS):
            j, in_class = i + 1, False
            while text[j] != "/" or in_class:
                if text[j] == "[":
                    in_class = True
                elif text[j] == "]":
                    in_class = False
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "{":
            depth += 1
            i += 1
        elif c == "}":
            if templates and templates[-1] == depth:
                templates.pop()
                i = template_text(i + 1)
                prev = "`"
            else:
                depth -= 1
                i += 1
        else:
            i += 1
    return "".join(out)


def matching(code: str, i: int) -> int:
    """The index of the bracket closing the one at i."""
    opening, closing = code[i], {"(": ")", "{": "}", "[": "]"}[code[i]]
    depth = 0
    for j in range(i, len(code)):
        depth += (code[j] == opening) - (code[j] == closing)
        if depth == 0:
            return j
    raise ValueError(f"no {closing} for the {opening} at {i}")


FUNCTION_HEAD = re.compile(r"\bfunction\b\s*\*?\s*(\w*)\s*\(|(\w+)\s*\([^()]*\)\s*\{|=>\s*\{")
ARROW_NAME = re.compile(r"(\w+)\s*[=:]\s*(?:async\s*)?(?:\([^()]*\)|\w+)\s*$")


def functions(text: str) -> list[tuple[str, int, int]]:
    """Every function in a module (declarations, expressions, arrows with a body, methods),
    nested ones too, as (name, first line, line count)."""
    code = code_only(text)
    found = []
    for m in FUNCTION_HEAD.finditer(code):
        if m.group(0).startswith("function"):
            name = m.group(1) or "<anonymous>"
            body = code.index("{", matching(code, m.end() - 1))
        elif m.group(2) is not None:
            if m.group(2) in KEYWORDS:
                continue
            name, body = m.group(2), m.end() - 1
        else:
            head = ARROW_NAME.search(code, 0, m.start())
            name, body = (head.group(1) if head else "<arrow>"), m.end() - 1
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, matching(code, body)) + 1
        found.append((name, first, last - first + 1))
    return found


def test_code_only_blanks_braces_in_strings_templates_comments_and_regexes():
    text = "const a = '{'; // }\nconst b = `x{${f({y: 1})}}` /* { */ + /[{]/.source;\n"
    code = code_only(text)
    assert code.count("\n") == text.count("\n") and len(code) == len(text)
    assert code.count("{") == code.count("}") == 2  # only `${` ... `}` and the object literal {y: 1}
    assert "f(" in code and "source" in code


def test_functions_spans_declarations_arrows_and_methods():
    text = "export function f(a = {}) {\n  const g = (x) => {\n    return `}${x}`;\n  };\n}\n" \
        "const h = async x => {\n}\nclass C {\n  m(y) {\n    if (y) {\n    }\n  }\n}\n"
    assert functions(text) == [("f", 1, 5), ("g", 2, 3), ("h", 6, 2), ("m", 9, 4)]


def test_at_most_two_javascript_functions_are_over_80_lines():
    modules = sorted(JS.rglob("*.js"))
    long = [f"{path.relative_to(JS)}:{line} {name} ({count} lines)"
            for path in modules
            for name, line, count in functions(path.read_text(encoding="utf-8"))
            if count > LONG_FUNCTION_LINES]
    assert len(long) <= LONG_FUNCTIONS_ALLOWED, long


# The house's rule: no module-level mutable state (issue 31, item 2). What a module keeps between calls lives in
# the page's one state object (state.js) or in an object its install/create function makes, so that two pages,
# two notebook widgets or two lessons never share it. A module's top level holds constants only.
TOP_LET = re.compile(r"\b(let|var)\s+(\w+)")
TOP_CONST = re.compile(r"\bconst\s+(\w+)\s*=")
CONTAINER = re.compile(r"\s*(?:new\s+(?:Map|Set|WeakMap|WeakSet|Array|Object)\b|\[\s*\]|\{\s*\})")
# an assignment to a part of `name` (not of `other.name`), or a call or operator that changes it in place
CHANGE = (r"(?<![\w.$]){name}\s*(?:\.\s*\w+|\[[^\]\n]*\])+\s*(?:[-+*/%&|^]?=(?!=)|\+\+|--)"
          r"|(?<![\w.$]){name}\s*\.\s*(?:push|pop|shift|unshift|splice|sort|reverse|fill|set|add|delete|clear)\s*\("
          r"|\bdelete\s+{name}\b|Object\.assign\(\s*{name}\b")


def top_level(code: str) -> str:
    """`code` (code_only's) with everything inside braces, brackets and parentheses blanked: the module's top
    level, where each binding lives as long as the page."""
    out, depth = list(code), 0
    for i, c in enumerate(code):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth and c != "\n":
            out[i] = " "
    return "".join(out)


def shadows(code: str, name: str) -> bool:
    """Whether `code` declares `name` again: a local const/let/var, or a parameter of a function, arrow or method
    (a parenthesised list naming it before `=>` or `{`, that of no if, for, while, switch or catch)."""
    if re.search(rf"\b(?:const|let|var)\s+{name}\b|\b{name}\s*=>", code):
        return True
    for m in re.finditer(rf"(\w*)\s*\([^()]*\b{name}\b[^()]*\)\s*(?:=>|\{{)", code):
        if m.group(1) not in {"if", "for", "while", "switch", "catch", "with"}:
            return True
    return False


def module_state(text: str, others: str = "") -> list[str]:
    """The module-level mutable state of a module: its top-level `let`/`var` bindings; the containers it binds
    at the top (a Map, a Set, an empty array or object) that it or another module (`others`: their code) changes
    by that name; and the other top-level constants it changes a part of (`errors[lesson] = …`) where no
    function takes or declares the same name for itself."""
    code = code_only(text)
    top = top_level(code)
    line = lambda i: code.count("\n", 0, i) + 1  # noqa: E731
    found = [f"{line(m.start())}: {m.group(1)} {m.group(2)}" for m in TOP_LET.finditer(top)]
    for m in TOP_CONST.finditer(top):
        name = m.group(1)
        change = re.compile(CHANGE.format(name=name))
        if CONTAINER.match(code, m.end()):  # the literal read whole: `top` blanks inside its brackets
            if change.search(code) or change.search(others):
                found.append(f"{line(m.start())}: const {name}, a container that is changed")
            continue
        if (hit := change.search(code)) and not shadows(code[m.end():], name):
            found.append(f"{line(hit.start())}: changes the module's const {name}")
    return found


def test_module_state_finds_top_level_lets_changed_containers_and_changed_constants():
    text = ("let count = 0;\nconst ids = new WeakMap();\nconst errors = {};\nconst seen = [];\n"
            "const state = { answer: null };\nfunction f(x) {\n  let local = 1;\n  state.answer = x;\n"
            "  ids.set(x, 1);\n  errors[x] = 1;\n}\nconst LIMITS = { n: 3 };\nconst view = { s: 1 };\n"
            "function g(view) {\n  view.s = 2;\n  app.state.x = 1;\n}\nconst needs = [];\nconst limits = { n: 1 };\n"
            "const h = () => {\n  use(1, limits);\n  if (limits.n) {\n    limits.n = 2;\n  }\n};\n"
            "const text = `let ${'var'} x`; // let y\n")
    assert module_state(text, others="import { seen } from './a.js';\nseen.push(1);\n") == [
        "1: let count", "2: const ids, a container that is changed", "3: const errors, a container that is changed",
        "4: const seen, a container that is changed", "8: changes the module's const state",
        "23: changes the module's const limits",
    ]


def test_no_module_keeps_mutable_state_at_its_top_level():
    modules = sorted(JS.rglob("*.js"))
    codes = {path: code_only(path.read_text(encoding="utf-8")) for path in modules}
    found = [f"{path.relative_to(JS)}:{where}" for path in modules
             for where in module_state(path.read_text(encoding="utf-8"),
                                       "\n".join(c for p, c in codes.items() if p != path))]
    assert not found, found
