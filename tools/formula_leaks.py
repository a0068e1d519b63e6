"""Exercises that check, never tell — the formulas: does the page state the formula that gives an
exercise's short answer from the numbers of its own prompt?

`tools/leaks.py` searches a chapter for the *numbers* its exercises accept, but only numbers of three
or more digits: a "3" or a "14" stands on every page for a hundred reasons. A one- or two-digit
answer can still be handed over, by a formula: the page says "the ring takes 2(N−1) rounds" and the
exercise asks for the rounds at N = 8. `formula_leaks(notebook)` finds those:

1. every formula of the chapter's markdown — LaTeX between `$…$` / `$$…$$`, inline code, and
   plain-text formulas such as 2(N−1)/N·S — translated to an arithmetic expression over its symbols
   (each side of an `=` or `≈` separately; a formula with no operator, no symbol or more than four
   symbols is not one an exercise can be read off);
2. every numeric exercise's prompt read for the values it gives symbols: by name ("N = 8", "m=16",
   "α = 10 µs") or by the word a number counts ("8 ranks" binds N, n or W; "4 stages" p; "16
   micro-batches" m; "24 layers" L; "64 experts" E; "2 nodes" — see `COUNTED`);
3. a formula whose every symbol the prompt binds is evaluated on those values; when the exercise
   accepts the result, the result is written with one or two significant digits, and it is not
   itself one of the prompt's numbers (a choice among the prompt's options is not a computation),
   the page has given the answer away: "rounds: 2(N−1) in cell 7 with N=8 gives it".

Predict-then-run exercises are skipped: predicting from the page's model, then measuring, is their
point. Numbers of three or more digits stay `tools/leaks.py`'s.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import pathlib
import re

from tools.leaks import _accepted_middle, _accepts, chapter_exercises

GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "lambda": "λ",
         "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "psi": "ψ",
         "Psi": "Ψ", "Delta": "Δ", "Phi": "Φ", "theta": "θ", "eta": "η", "kappa": "κ"}
FUNCTIONS = {"sqrt": math.sqrt, "ceil": math.ceil, "floor": math.floor, "log2": math.log2,
             "log": math.log, "min": min, "max": max}
NAMED = {"tp", "dp", "pp", "cp", "ep", "sp"}  # parallel degrees written as one symbol
# the word a prompt's number counts → the symbols a formula writes it with
COUNTED = {
    r"ranks?|GPUs?|workers?|devices?|processes|replicas|accelerators": ("N", "n", "W"),
    r"stages?": ("p", "P", "pp"),
    r"micro-?batch(?:es)?": ("m", "M"),
    r"layers?|blocks?": ("L", "l"),
    r"experts?": ("E",),
    r"nodes?|machines?": ("M",),
    r"heads?": ("h", "H"),
}
UNITS = {"GB", "MB", "KB", "kB", "B", "ms", "s", "us", "µs", "GiB", "MiB", "FLOP", "FLOPs", "bytes",
         "TB", "GB/s", "TFLOP", "PFLOP"}
SYMBOL = r"(?:[A-Za-zΨαβγδελμπρσταφψΔΦθηκ](?:_\{?\w+\}?)?)"
NUMBER = r"(\d+(?:,\d{3})*(?:\.\d+)?)"
BIND_BY_NAME = re.compile(rf"(?<![\w.])\$?\\?({SYMBOL}|tp|dp|pp|cp|ep|sp)\$?\s*=\s*{NUMBER}")


def formulas_of(markdown: str) -> list[str]:
    """The formulas written in `markdown`, each as written."""
    found = re.findall(r"\$\$(.+?)\$\$", markdown, re.S)
    found += re.findall(r"(?<!\$)\$([^$\n]+?)\$(?!\$)", re.sub(r"\$\$.+?\$\$", " ", markdown, flags=re.S))
    # inline code reads as plain text: `clock` is a name, not c·l·o·c·k
    plain = re.sub(r"\$[^$]*\$", " ", markdown).replace("`", " ")
    for run in re.findall(r"[0-9A-Za-zΨαβγδελμπρσταφψΔΦθηκ_()·×/+−*^.√ ]+", plain):
        # a word of two or more letters ends a formula: prose between formulas is not one
        for piece in re.split(r"\b[A-Za-z]{2,}\b", run):
            piece = piece.strip(" .+−*/·×^")
            if re.search(r"[·×/+−*^]", piece) and re.search(r"[A-Za-zΨαβγδελμπρσταφψΔΦθηκ]", piece):
                found.append(piece)
    return found


def _latex_to_plain(text: str) -> str | None:
    """LaTeX math → the plain notation `expression` reads; None for what it does not know."""
    text = re.sub(r"\\(left|right|big|Big|bigg|Bigg|displaystyle|,|;|!|:|quad|qquad)(?![a-zA-Z])",
                  " ", text).replace("\\ ", " ").replace("{,}", "")
    text = re.sub(r"\\(?:text|mathrm|operatorname|mathit|mathbf)\{([^{}]*)\}", r"\1", text)
    for _ in range(6):  # nested fractions, inside out
        text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = re.sub(r"\\lceil(.*?)\\rceil", r"ceil(\1)", text)
    text = re.sub(r"\\lfloor(.*?)\\rfloor", r"floor(\1)", text)
    text = re.sub(r"\\log_\{?2\}?", "log2", text)
    text = re.sub(r"\\(log|ln)(?![a-zA-Z])", "log", text)
    text = re.sub(r"\\(min|max)(?![a-zA-Z])", r"\1", text)
    text = re.sub(r"\\(cdot|times)(?![a-zA-Z])", "*", text).replace("\\div", "/")
    text = re.sub(r"\\(approx|le|ge|leq|geq|ll|gg|to|sim|simeq|neq|Rightarrow)(?![a-zA-Z])", "=", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: GREEK.get(m.group(1), "\\" + m.group(1)), text)
    if "\\" in text:
        return None
    text = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", text)
    return text.replace("{", "(").replace("}", ")")


TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(sqrt|ceil|floor|log2|log|min|max)(?=\()|"
                   r"(tp|dp|pp|cp|ep|sp)(?![A-Za-z])|"
                   r"([A-Za-zΨαβγδελμπρσταφψΔΦθηκ](?:_\(?[A-Za-z0-9]+\)?)?)|(\*\*|[-+*/^(),]))")


def expression(formula: str, latex: bool) -> tuple[str, set[str]] | None:
    """(python expression, its symbols) of one side of a formula; None when it is not arithmetic."""
    text = _latex_to_plain(formula) if latex else formula
    if text is None:
        return None
    text = text.replace("−", "-").replace("·", "*").replace("×", "*").replace("√", "sqrt")
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = TOKEN.match(text, position)
        if not match:
            return None
        number, function, named, symbol, operator = match.groups()
        kind, value = next((k, v) for k, v in zip(("num", "fun", "sym", "sym", "op"),
                                                  (number, function, named, symbol, operator)) if v)
        if kind == "sym":
            value = "v_" + re.sub(r"[()]", "", value).replace("_", "__")
        implicit = tokens and (tokens[-1][0] in ("num", "sym") or tokens[-1][1] == ")") \
            and (kind in ("num", "sym", "fun") or value == "(")
        if implicit:
            tokens.append(("op", "*"))
        tokens.append((kind, "**" if value == "^" else value))
        position = match.end()
    python = " ".join(v for _, v in tokens)
    symbols = {v for k, v in tokens if k == "sym"}
    if not symbols or len(symbols) > 4 or not any(k == "op" and v not in "()," for k, v in tokens):
        return None
    try:
        ast.parse(python, mode="eval")
    except SyntaxError:
        return None
    return python, symbols


def sides(formula: str, latex: bool) -> list[tuple[str, str, set[str]]]:
    """(as written, python expression, symbols) for each side of `formula`'s =, ≈, ≤ …"""
    text = _latex_to_plain(formula) if latex else formula
    if text is None:
        return []
    parts = re.split(r"=|≈|≤|≥|<|>|→|;|\bfor\b|\bvs\b", text)
    found = []
    for part in parts:
        parsed = expression(part, latex=False)
        if parsed:
            found.append((part.strip(), *parsed))
    return found


def prompt_bindings(prompt: str) -> dict[str, set[float]]:
    """The values `prompt` gives symbols: by name ("N = 8") or by what a number counts ("8 ranks")."""
    values: dict[str, set[float]] = {}

    def bind(symbol: str, number: str) -> None:
        key = "v_" + re.sub(r"[{}()$\\]", "", GREEK.get(symbol.strip("\\$"), symbol)).replace("_", "__")
        values.setdefault(key, set()).add(float(number.replace(",", "")))

    for symbol, number in BIND_BY_NAME.findall(prompt):
        bind(symbol, number)
    for words, symbols in COUNTED.items():
        for number in re.findall(rf"(?<![\w.]){NUMBER}[\s-]*(?:{words})\b", prompt):
            for symbol in symbols:
                bind(symbol, number)
    return values


def _short(value: float) -> bool:
    """Written with one or two significant digits (3, 14, 0.5, 2.5e9)."""
    return value != 0 and math.isclose(value, float(f"{value:.2g}"), rel_tol=1e-9)


def formula_leaks(notebook: pathlib.Path, exercises: list | None = None) -> list[str]:
    """'exercise: formula in cell i with N=8 gives it' for every short answer the page's formulas
    give from the exercise's own prompt (the chapter's exercises unless `exercises` is given);
    [] when none does."""
    cells = json.loads(pathlib.Path(notebook).read_text())["cells"]
    stated = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        markdown = "".join(cell["source"])
        latex = set(re.findall(r"\$\$(.+?)\$\$", markdown, re.S)
                    + re.findall(r"(?<!\$)\$([^$\n]+?)\$(?!\$)", markdown))
        for formula in formulas_of(markdown):
            stated += [(index, written, python, symbols)
                       for written, python, symbols in sides(formula, latex=formula in latex)]
    leaks = []
    for exercise in exercises if exercises is not None else chapter_exercises(pathlib.Path(notebook)):
        if exercise.kind == "predict":
            continue
        bindings = prompt_bindings(exercise.prompt)
        given = {float(n.replace(",", "")) for n in re.findall(NUMBER, exercise.prompt)}
        for index, written, python, symbols in stated:
            if not symbols <= bindings.keys():
                continue
            ordered = sorted(symbols)
            for choice in itertools.product(*(sorted(bindings[s]) for s in ordered)):
                try:
                    value = float(eval(python, {"__builtins__": {}, **FUNCTIONS},  # noqa: S307
                                       dict(zip(ordered, choice))))
                except (ArithmeticError, ValueError, TypeError, OverflowError):
                    continue
                if not math.isfinite(value) or value in given or not _accepts(exercise, value):
                    continue
                if _short(_accepted_middle(exercise, value)):
                    names = ", ".join(f"{s[2:].replace('__', '_')}={c:g}" for s, c in zip(ordered, choice))
                    leaks.append(f"{exercise.name}: {written} in cell {index} with {names} gives it")
                    break
    return sorted(set(leaks))
