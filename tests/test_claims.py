"""The claims check (tools/claims.py) finds a measured number that no output holds, and lets pass what
is backed by an output, cited, written in code, or not a claim. The browser test runs it on every
chapter's real execution (tests/test_browser.py)."""

from tools.claims import claim_numbers, sentences, unbacked_claims


def _notebook(markdown: list[str], code: str = "x = 1", output: str = "") -> dict:
    cells = [{"cell_type": "markdown", "source": m} for m in markdown]
    cells.append({"cell_type": "code", "source": code,
                  "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]})
    return {"cells": cells}


def test_a_measured_number_no_output_holds_is_reported():
    nb = _notebook(["The ring measured 27.5 ms here, 1.8× faster than the tree."],
                   output="ring 27.52 ms, tree 49.1 ms\n")
    problems = unbacked_claims(nb)
    assert len(problems) == 1 and "'1.8×'" in problems[0], problems


def test_backed_cited_coded_and_plain_numbers_pass():
    nb = _notebook([
        "The ring measured 27.5 ms, 1.78× faster than the tree.",           # both printed
        "Bucketing saves 27% of the step.",                                  # 0.27 printed as a fraction
        "PipeDream is faster at m ≥ p (Narayanan et al., SOSP 2019): 312 TFLOP/s.",  # a citation
        "With 1024 tokens the run holds.",                                   # 1024 written in code
        "An A100 does 312 TFLOP/s in bf16.",                                 # a specification, no claim
        "Measured on 4 ranks with PyTorch 2.13.",                            # a count and a version
    ], code="tokens = 1024", output="ring 27.52 ms (1.78x), saved fraction 0.2712\n")
    assert unbacked_claims(nb) == []


def test_precision_follows_what_is_written():
    assert claim_numbers("it measured 27%") == [(27.0, 0.5, "27%")]
    assert [w for *_, w in claim_numbers("measured 4 ranks, 24,576 B, 0.125 s, 3×")] == \
        ["24,576", "0.125", "3×"]
    nb = _notebook(["It measured 2.50 ms."], output="2.54 ms\n")  # 2.54 is not 2.50 at ±0.005
    assert len(unbacked_claims(nb)) == 1


def test_sentences_split_prose_lists_and_tables_and_drop_code_and_math():
    text = "First one. Second $x = 3.14$ here.\n- a list item with `12.5`\n| a | 1.5 |\n```\ny = 9.99\n```"
    found = sentences(text)
    assert found[:2] == ["First one.", "Second   here."] and len(found) == 4
    assert not any("3.14" in s or "12.5" in s or "9.99" in s for s in found)
