"""A smell detector for size: no module over 400 lines of code and no function
over 60 lines, in llp_tf/, tools/ and benchmarks/.

Code lines exclude blank lines, comments and docstrings, so a module that is
one concept stays whole however well it is documented; a module that outgrows
the cap is split by concept, never by line count.
"""

import ast
import glob
import io
import os
import tokenize

from tests.cli.tool_main import ROOT

MAX_MODULE_CODE_LINES = 400
MAX_FUNCTION_LINES = 60
# Docstrings state the contract in a few lines; how-to and measurements live in docs/.
MAX_COMMENT_AND_DOCSTRING_LINES_PER_CODE_LINE = 0.35


def _sources():
    paths = glob.glob(os.path.join(ROOT, "llp_tf", "**", "*.py"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "tools", "*.py"))
    paths += glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))
    assert len(paths) > 60
    for path in sorted(paths):
        with open(path) as f:
            yield os.path.relpath(path, ROOT), f.read()


def _docstring_lines(tree):
    """Line numbers of the module's, classes' and functions' docstrings."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(
                    body[0].value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source):
    """The number of lines holding code: not blank, comment or docstring lines."""
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
               tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - _docstring_lines(ast.parse(source)))


def test_code_lines_leave_out_comments_blanks_and_docstrings():
    source = ('"""Module\n\ndocstring."""\n\n# a comment\nimport os  # why\n\n\n'
              'def f(x):\n    """Doc."""\n    return (x +\n            1)\n')
    assert code_lines(source) == 4  # import, def, and the two lines of the return


def test_modules_and_functions_stay_small():
    too_long = []
    for path, source in _sources():
        lines = code_lines(source)
        if lines > MAX_MODULE_CODE_LINES:
            too_long.append(f"{path}: {lines} lines of code")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path}: {node.name} has {length} lines")
    assert not too_long, "\n".join(too_long)


def comment_and_docstring_lines(source):
    """The number of lines holding a comment or part of a docstring."""
    comments = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    return len(comments | _docstring_lines(ast.parse(source)))


def test_comment_and_docstring_counts_leave_out_code():
    source = '"""Module\n\ndocstring."""\n\n# a comment\nimport os  # why\n\n\ndef f():\n    """D."""\n'
    assert comment_and_docstring_lines(source) == 6  # three of the docstring, two comments, D


def test_the_package_says_each_thing_briefly():
    paths = glob.glob(os.path.join(ROOT, "llp_tf", "**", "*.py"), recursive=True)
    code = explanation = 0
    for path in paths:
        with open(path) as f:
            source = f.read()
        code += code_lines(source)
        explanation += comment_and_docstring_lines(source)
    ratio = explanation / code
    assert ratio <= MAX_COMMENT_AND_DOCSTRING_LINES_PER_CODE_LINE, (
        f"{explanation} comment and docstring lines over {code} lines of code in llp_tf/: "
        f"{ratio:.2f} per code line")
