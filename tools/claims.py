"""No sentence the run contradicts: does a chapter's markdown state a measured number its run never printed?

A chapter's markdown may state formulas, paper facts, hardware specifications and its parameters;
what *this run* measured must be printed by code from the run, with a verdict computed beside it.
`unbacked_claims(notebook, executed)` reads the markdown of the executed chapter sentence by sentence
and finds the claims: a sentence that speaks of a measurement or a comparison (`CLAIM_WORDS`:
"measured", "wins", "faster", "≈", "holds", "saves", ...). Each number of a claim that could be a
measurement (written with a decimal part, with three or more digits, or as a percentage or a ratio
"2.5×") must appear among the chapter's outputs, equal at the precision it is written to (a written
"27%" is backed by a printed 27.3% or 0.273; a written "1.8×" by a printed 1.83×). A claim with a
number no output holds is reported.

Not claims: a sentence that cites a paper (it names "et al.", a year in parentheses or a paper's
section, table or figure) — those numbers are the paper's; numbers in math (`$...$`), in code spans
and fenced code; versions ("PyTorch 2.13"); numbers the notebook's code cells write themselves
(parameters, sizes, the inputs of an experiment). The check cannot tell a right number from a
wrong one beside it in the outputs; it catches the number that no output holds — a sentence written
for another run, another size or another machine.

    python tools/claims.py notebooks/NN_x.ipynb build/NN_x.ipynb   # the source and its executed copy
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

CLAIM_WORDS = re.compile(
    r"(\bmeasur\w*|\bthis run\b|\bthe run\b|\bruns? shows?\b|\bwins?\b|\bbeats?\b|\bfaster\b|\bslower\b|"
    r"≈|\bholds\b|\bsaves?\b|\bfewer\b|\bspeed-?ups?\b|\boverr[au]n\b|\btook\b|\bprinted\b)",
    re.IGNORECASE)
CITATION = re.compile(r"et al\.|\((?:[^()]*\b)?(?:19|20)\d\d[a-z]?\)|\b(?:19|20)\d\d\b[,;)]|§|"
                      r"\b(?:Table|Figure|Fig\.|Section|Eq\.|Equation|arXiv)\b")
# a number as written in prose: 24,576 · 1.25 · 27% · 1.8× (not part of a word such as "gpt2" or "8B")
NUMBER = re.compile(r"(?<![\w.\-/])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?(%|×|x\b))?(?![\w.]\d|[A-Za-z])")
VERSION = re.compile(r"(?:PyTorch|torch|Python|CUDA|NCCL|version|v)\s?$", re.IGNORECASE)
OUTPUT_NUMBER = re.compile(r"(?<![\w.])-?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?")


def _prose(markdown: str) -> str:
    """The markdown without what is not prose: fenced code, code spans, math, link targets, HTML."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.DOTALL)
    text = re.sub(r"\$[^$\n]+\$", " ", text)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # [text](url) keeps its text
    text = re.sub(r"<[^>]+>", " ", text)
    return text


def sentences(markdown: str) -> list[str]:
    """Sentences of a markdown cell; a list item, a table row and a heading are sentences too."""
    found = []
    for line_block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.|#|\|))", _prose(markdown)):
        for sentence in re.split(r"(?<=[.!?:])\s+(?=[A-Z(*\"“])", line_block.replace("\n", " ")):
            if sentence.strip():
                found.append(sentence.strip())
    return found


def claim_numbers(sentence: str) -> list[tuple[float, float, str]]:
    """(value, half the unit of its last written digit, as written) of the numbers in a claim that
    could be measurements."""
    numbers = []
    for match in NUMBER.finditer(sentence):
        if VERSION.search(sentence[:match.start()]):
            continue  # "PyTorch 2.13": a version, not a quantity
        whole, fraction, suffix = match.group(1), match.group(2) or "", match.group(3) or ""
        digits = whole.replace(",", "")
        if not (fraction or suffix or len(digits.lstrip("0")) >= 3):
            continue  # a small count ("4 ranks", "step 2") is a parameter, not a measurement
        value = float(digits + fraction)
        half_unit = 0.5 * 10.0 ** (-(len(fraction) - 1) if fraction else 0)
        numbers.append((value, half_unit, match.group(0)))
    return numbers


def _outputs_and_code(executed: dict) -> tuple[list[float], str]:
    values, code = [], []
    for cell in executed["cells"]:
        if cell["cell_type"] != "code":
            continue
        code.append("".join(cell.get("source", "")))
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = "".join(output.get("text", "")) + "".join(data.get("text/plain", "")) \
                + re.sub(r"<[^>]+>", " ", "".join(data.get("text/html", ""))) \
                + "".join(data.get("text/markdown", ""))
            for whole, fraction, exponent in OUTPUT_NUMBER.findall(text):
                values.append(float(whole.replace(",", "") + fraction + exponent))
    return values, "\n".join(code)


def _backed(value: float, half_unit: float, percent: bool, printed: list[float]) -> bool:
    scales = (1.0, 100.0) if percent else (1.0,)  # a written 27% is a printed 27.3% or 0.273
    return any(abs(p * scale - value) <= half_unit * (1 + 1e-9) for p in printed for scale in scales)


def unbacked_claims(executed: dict) -> list[str]:
    """'cell 12: "27%" in: <sentence>' for every claim number no output of `executed` holds."""
    printed, code = _outputs_and_code(executed)
    written_in_code = {float(n.replace("_", "")) for n in
                       re.findall(r"(?<![\w.])\d+(?:_\d{3})*(?:\.\d+)?(?![\w])", code)}
    problems = []
    for index, cell in enumerate(executed["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for sentence in sentences("".join(cell.get("source", ""))):
            if not CLAIM_WORDS.search(sentence) or CITATION.search(sentence):
                continue
            for value, half_unit, written in claim_numbers(sentence):
                if value in written_in_code or \
                        _backed(value, half_unit, written.endswith("%"), printed):
                    continue
                problems.append(f"cell {index}: {written!r} in: {sentence[:160]}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1 and len(argv) != 2:
        print(__doc__.rsplit("\n\n", 1)[-1])
        return 2
    executed = json.loads(pathlib.Path(argv[-1]).read_text())
    problems = unbacked_claims(executed)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} unbacked claim(s) in {argv[-1]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
