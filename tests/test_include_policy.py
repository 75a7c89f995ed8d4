"""What a submission may #include, and every trick that could make the compiler open another file."""
from __future__ import annotations

import builtins
from pathlib import Path

import pytest
from hardware import needs_nvcc

from grader.source.include_policy import (
    ASSEMBLY,
    DEFAULT_ALLOWED_HEADERS,
    DIRECTIVE,
    INCLUDE,
    LINE,
    PASTE,
    PRAGMA,
    HeaderPolicy,
    IncludeViolation,
    check_includes,
    check_source,
    describe,
    drop_host_headers,
    include_folders,
    line_directive_violations,
    needs_expansion,
    pasted_violations,
    pastes_shown,
    unproven_pasting_macros,
)

ROOT = Path(__file__).resolve().parent.parent
ABSOLUTE = "absolute paths are not allowed in header names"
COMPUTED = ('the header name comes from a macro or expression, so it could name any file; '
            'write it out as <name> or "name"')
NOT_THERE = "is not a header of the CUDA toolkit or the C/C++ compiler"
INCLUDE_LIKE = "can open any file; only #include of a toolkit or compiler header is accepted"
KERNEL = "__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {}\n"


def only(source: str, allowed=None) -> IncludeViolation:
    violations = check_includes(source, allowed)
    assert len(violations) == 1, violations
    return violations[0]


# --- what is refused ------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "line", "directive", "reason"), [
    ('#include "/etc/passwd"\n', 1, '#include "/etc/passwd"', ABSOLUTE),
    ('#include "../config.yaml"\n', 1, '#include "../config.yaml"', '".." is not allowed in header names'),
    ('#include u8"stdio.h"\n', 1, '#include u8"stdio.h"', COMPUTED),
    ("#include </etc/passwd>\n", 1, "#include </etc/passwd>", "absolute paths are not allowed in header names"),
    ("#include <C:/secret.h>\n", 1, "#include <C:/secret.h>", "absolute paths are not allowed in header names"),
    ("#include <../../etc/passwd>\n", 1, "#include <../../etc/passwd>", '".." is not allowed in header names'),
    ("#include <sys/../stdio.h>\n", 1, "#include <sys/../stdio.h>", '".." is not allowed in header names'),
    ("#include <..\\secret.h>\n", 1, "#include <..\\secret.h>", "backslashes are not allowed in header names"),
    ("#include < stdio.h >\n", 1, "#include < stdio.h >", "a header name may hold only letters, digits and _ . + / -"),
    ("#include <stdio.h> extra\n", 1, "#include <stdio.h> extra", "there is extra text after the header name"),
    ("#include\n", 1, "#include", "#include needs a header name"),
    ("#include FOO\n", 1, "#include FOO", COMPUTED),
    ('#define F "/etc/passwd"\n#include F\n', 2, "#include F", COMPUTED),
    ("#define H(x) <x>\n#include H(stdio.h)\n", 2, "#include H(stdio.h)", COMPUTED),
    ("#include_next <stdio.h>\n", 1, "#include_next <stdio.h>", f"#include_next {INCLUDE_LIKE}"),
    ("#import <stdio.h>\n", 1, "#import <stdio.h>", f"#import {INCLUDE_LIKE}"),
    ('const char d[] = {\n#embed "/etc/passwd"\n};\n', 2, '#embed "/etc/passwd"', f"#embed {INCLUDE_LIKE}"),
    ("#embed <cuda.h>\n", 1, "#embed <cuda.h>", f"#embed {INCLUDE_LIKE}"),
])
def test_refused_includes(source, line, directive, reason):
    assert only(source) == IncludeViolation(line, directive, reason, INCLUDE)


@needs_nvcc  # where no toolkit can be asked, the fallback list decides (its own test below)
@pytest.mark.parametrize(("source", "line", "directive", "reason"), [
    ('#include "helper.cuh"\n', 1, '#include "helper.cuh"', f'"helper.cuh" {NOT_THERE}'),
    ('#include "kernel.cu"\n', 1, '#include "kernel.cu"', f'"kernel.cu" {NOT_THERE}'),
    ('#include "self/environ"\n', 1, '#include "self/environ"', f'"self/environ" {NOT_THERE}'),
    ('#include "grader/config.py"\n', 1, '#include "grader/config.py"', f'"grader/config.py" {NOT_THERE}'),
    ('#include "passwd"\n', 1, '#include "passwd"', f'"passwd" {NOT_THERE}'),
    ("#include <no_such_header.h>\n", 1, "#include <no_such_header.h>", f"<no_such_header.h> {NOT_THERE}"),
])
def test_headers_that_resolve_in_no_toolkit_or_compiler_folder_are_refused(source, line, directive, reason):
    assert only(source) == IncludeViolation(line, directive, reason, INCLUDE)


@pytest.mark.parametrize(("source", "line", "directive"), [
    ('#inc\\\nlude "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # line continuation inside the name
    ('#\\\ninclude "/etc/passwd"\n', 1, '#include "/etc/passwd"'),
    ('#include \\\n"/etc/passwd"\n', 1, '#include "/etc/passwd"'),
    ('int x;\n#inc\\   \nlude "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # spaces after the backslash (GCC)
    ('#inc\\\r\nlude "/etc/passwd"\r\n', 1, '#include "/etc/passwd"'),  # CRLF
    ('%:include "/etc/passwd"\n', 1, '%:include "/etc/passwd"'),  # digraph
    ('%:  include "/etc/passwd"\n', 1, '%:  include "/etc/passwd"'),
    ('??=include "/etc/passwd"\n', 1, '??=include "/etc/passwd"'),  # trigraph (C++14 and older, -trigraphs)
    ('#inc??/\nlude "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # trigraph backslash continuation
    ('#/**/include "/etc/passwd"\n', 1, '#/**/include "/etc/passwd"'),
    ('# /* a */ include /* b */ "/etc/passwd"\n', 1, '# /* a */ include /* b */ "/etc/passwd"'),
    ('/* hello */ #include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),
    ('/* a\n comment */ #include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),
    ('\ufeff#include "/etc/passwd"\n', 1, '#include "/etc/passwd"'),  # byte-order mark
    ('  \t #  include "/etc/passwd"\n', 1, '#  include "/etc/passwd"'),
    ('#if 0\n#include "/etc/passwd"\n#endif\n', 2, '#include "/etc/passwd"'),  # inactive code counts too
    ('#ifdef NEVER_DEFINED\n# include "/etc/passwd"\n#endif\n', 2, '# include "/etc/passwd"'),
    ('// a comment\r#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # a lone CR ends a line
    ('int x = f(1,\n#include "/etc/passwd"\n);\n', 2, '#include "/etc/passwd"'),  # inside macro arguments
    ('int x; /* never closed\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),
    ("int x = 1'0; /* '\n#include \"/etc/passwd\"\n*/\n", 2, '#include "/etc/passwd"'),  # C++11: no digit separators
    ('// comment ??/\n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # hidden only with trigraphs
    ('// comment \\ \n#include "/etc/passwd"\n', 2, '#include "/etc/passwd"'),  # hidden only by GCC
])
def test_disguised_includes_are_refused(source, line, directive):
    violation = only(source)
    assert (violation.line, violation.directive, violation.reason) == (line, directive, ABSOLUTE)


def test_raw_strings_hide_nothing_from_cxx03():
    # C++11 reads line 2 as part of a raw string; C++03 (nvcc -std=c++03) has no raw strings and
    # reads a directive there. Strict: it counts.
    assert only('auto s = R"(\n#include "/etc/passwd"\n)";\n').line == 2


def test_an_r_after_a_string_is_a_suffix_not_a_raw_string():
    # Found by differential fuzzing against g++ -E: "..."R is a string with a user-defined-literal
    # suffix, so R"( does not start a raw string and line 2 is a directive.
    source = 'auto s = "a"R"(x\n#include "/etc/passwd"\n)";\n'
    assert only(source).line == 2


def test_raw_string_delimiters_are_read_on_the_unspliced_text():
    # The compiler undoes line splicing inside raw strings: the raw string ends on line 2, and line 3
    # is a real directive. Reading the spliced text would end it on line 1 and open a comment instead.
    source = 'auto s = R"x(a)x\\\n" /* )x";\n#include "/etc/passwd"\n */\n'
    assert only(source).line == 3


@pytest.mark.parametrize("source", [
    "#if __has_include(</etc/shadow>)\n#endif\n",
    '#if __has_include("/etc/shadow")\n#endif\n',
    "#if defined(__has_include) && __has_include_next(<stdio.h>)\n#endif\n",
    "#if __has_embed(</etc/shadow>)\n#endif\n",
    "#define PROBE __has_include\n",
    "int x = __has_include(<stdio.h>);\n",
])
def test_header_probes_are_refused(source):
    violation = only(source)
    assert violation.kind == INCLUDE and "probes files on the grading machine" in violation.reason


@pytest.mark.parametrize(("source", "reason"), [
    ('#pragma GCC dependency "/etc/passwd"\n', "#pragma GCC dependency can open files"),
    ('#pragma GCC pch_preprocess "/tmp/x.gch"\n', "#pragma GCC pch_preprocess can open files"),
    ('#pragma include_alias("cuda.h", "/etc/passwd")\n', "#pragma include_alias can open files"),
    ('#pragma comment(lib, "/etc/passwd")\n', "#pragma comment can open files"),
    ("#pragma GCC whatever\n", "#pragma GCC whatever is not one of the GCC pragmas the lab allows"),
    ('_Pragma("GCC dependency \\"/etc/passwd\\"")\n', "_Pragma GCC dependency can open files"),
    ("#define P(x) _Pragma(#x)\n", "_Pragma must be given one plain string literal"),
    ("_Pragma(FOO)\n", "_Pragma must be given one plain string literal"),
    ('__pragma(comment(lib, "x"))\n', "__pragma is not allowed; use #pragma"),
])
def test_file_opening_pragmas_are_refused(source, reason):
    assert (only(source).reason, only(source).kind) == (reason, PRAGMA)


INCBIN = "inline assembly may not use .incbin, .include or assembler macros: they can read files"
ASM_COMPUTED = "the assembly text of asm(...) must be written out as string literals, not come from a macro"


@pytest.mark.parametrize(("source", "reason"), [
    ('void f() { asm(".incbin \\"/etc/passwd\\""); }\n', INCBIN),
    ('void f() { __asm__ __volatile__(".incbin \\"/etc/passwd\\""); }\n', INCBIN),
    ('void f() { asm(".inc" "bin \\"/etc/passwd\\""); }\n', INCBIN),  # literal concatenation
    ('void f() { asm("\\x2eincbin \\"/etc/passwd\\""); }\n', INCBIN),  # escapes
    ('void f() { asm("\\056INCBIN \\"/etc/passwd\\""); }\n', INCBIN),
    ('void f() { asm(R"(.incbin "/etc/passwd")"); }\n', INCBIN),  # raw string
    ('void f() { asm(".include \\"/etc/passwd.s\\""); }\n', INCBIN),
    ('void f() { asm(".macro m a\\n.\\\\a \\"/etc/passwd\\"\\n.endm\\nm incbin"); }\n', INCBIN),
    ('#define S ".incbin \\"/etc/passwd\\""\nvoid f() { asm(S); }\n', ASM_COMPUTED),
    ("#define STR(x) #x\nvoid f() { asm(STR(.incbin \"/etc/passwd\")); }\n", ASM_COMPUTED),
    ("#define A asm\n", 'asm may only be used as asm("...") with the assembly written out as a string'),
])
def test_assembler_file_reads_are_refused(source, reason):
    violations = check_includes(source)
    assert [(v.reason, v.kind) for v in violations][-1] == (reason, ASSEMBLY)


@pytest.mark.parametrize("source", [
    "#define Matrix(M, r, c) (M[num##M##Columns * (r) + (c)])\n",  # an ECE408 file's indexing macro
    "#define AT(M, r, c) M[(r) * ld_##M + (c)]\n",
    "#define TILE_OF(x) TILE_##x\n#define TILE_A TILE_OF(A)\n",
    "#define NAME tile ## _size\n",  # written out entirely: it spells tile_size
])
def test_a_paste_with_a_written_out_part_no_refused_name_holds_is_accepted_from_the_text(source):
    """The token a paste makes contains its written-out operand, so `num`, `Columns` or `ld_` rule out every name
    the policy refuses, whatever the argument: no expansion is needed."""
    assert check_source(source) == []


@pytest.mark.parametrize(("source", "kind", "built"), [
    ("#define P _Pra ## gma\n", PRAGMA, "_Pragma"),
    ("#define A a ## s ## m\n", ASSEMBLY, "asm"),
    ("#define H __has_ %:%: include\n", INCLUDE, "__has_include"),
])
def test_a_paste_written_out_that_spells_a_refused_name_is_refused(source, kind, built):
    violation = only(source)
    assert (violation.line, violation.kind) == (1, kind)
    assert violation.reason == f"token pasting (##) here builds {built}, which is not allowed"


@pytest.mark.parametrize("source", ["#define J(a, b) a ## b\n", "#define J(a, b) a %:%: b\n",
                                    "#define P(x) _Pra ## x\n", "#define V(...) __VA_ARGS__ ## m\n"])
def test_a_paste_the_text_cannot_judge_waits_for_the_expansion(source):
    """Two arguments, or a written-out part that a refused name holds (`_Pra`): only the uses say what it makes."""
    violations = check_source(source)
    assert [v.kind for v in violations] == [PASTE] and needs_expansion(violations)
    assert not needs_expansion(violations + [only("#include </etc/passwd>\n")])


def test_a_pasting_macro_may_not_decide_an_if():
    """A pasted __has_include in #if probes a file while the preprocessor decides, and leaves no text behind."""
    source = "#define J(a, b) a ## b\n#define K(x) J(x, include)\n#if K(__has_)(<x>)\n#endif\n#if defined(J)\n#endif\n"
    assert [(v.line, v.kind) for v in check_source(source)] == [(1, PASTE), (3, INCLUDE)]
    assert "#if may not use K" in check_source(source)[1].reason
    header = "#define J(a, b) a ## b\n"  # a header handed in with the file defines it
    assert check_source("#if J(__has_, include)(<x>)\n#endif\n", pasting=unproven_pasting_macros([header]))


def test_the_pastes_shown_keep_every_line_number():
    source = "#define J(a, b) a \\\n ## b\n#define Matrix(M, r, c) M[num##M##Columns * (r) + (c)]\nJ(x, y)\n"
    shown = pastes_shown(source, 3, "Gtag")
    assert shown.count("\n") == source.count("\n")
    assert shown.startswith("#define J(a, b) Gtag_SHOW(3, 1, a \\\n ## b)\n")
    assert "M[num##M##Columns" in shown  # harmless: not wrapped
    expansion = 'x; Gtag_MADE(3, 1, "_Pragma") _Pragma("x")\n'
    files = ["", "", "", source]
    assert [(f, v.line, v.kind) for f, v in pasted_violations([expansion], files, "Gtag")] == [(3, 1, PRAGMA)]
    assert pasted_violations(['Gtag_MADE(3, 1, "numAColumns")'], files, "Gtag") == []


def test_header_unit_imports_are_refused():
    assert only("import <stdio.h>;\n").reason == "importing a header unit can open any file"
    assert only('export import "x.h";\n').kind == INCLUDE


@pytest.mark.parametrize("source", ["#ident \"x\"\n", "#assert machine(x)\n", "#sccs \"x\"\n", "#using <x.dll>\n"])
def test_other_directives_are_refused(source):
    assert only(source).kind == DIRECTIVE


def test_a_file_is_never_opened(monkeypatch, tmp_path):
    secret = tmp_path / "secret.h"
    secret.write_text("int the_secret_value = 42;\n")

    def refuse(*args, **kwargs):
        raise AssertionError("check_includes opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    violations = check_source(f'#include "{secret}"\n#include <{secret}>\n#line 3 "{secret}"\n')
    assert [v.line for v in violations] == [1, 2, 3]
    assert all("the_secret_value" not in v.directive + v.reason for v in violations)


def test_directive_text_is_made_safe_to_print():
    violation = only('#include "\x1b[2J\u202e/etc/passwd"\n')
    assert violation.directive == '#include "\\x1b[2J\\u202e/etc/passwd"'
    long = only('#include "' + "a" * 300 + '"\n')
    assert len(long.directive) == 100 and long.directive.endswith("...")


def test_one_violation_per_line_and_lines_in_order():
    source = '#include "b"\nint x;\n#include "a"\n#if __has_include("c") // and ## here\n#endif\n'
    assert [v.line for v in check_includes(source)] == [1, 3, 4]


# --- what is accepted -----------------------------------------------------------------------------


@pytest.mark.parametrize("source", [
    "#include <cuda_runtime.h>\n",
    "#  include <cuda_runtime.h>\n",
    "\t#\tinclude\t<cuda_runtime.h>\t\n",
    "#include<stdio.h>\n",
    "#include <stdio.h> // the usual\n",
    "#include <stdio.h> /* the usual */\n",
    "# /* c */ include /* c */ <math.h>\n",
    "%:include <cmath>\n",
    "#inc\\\nlude <cstdio>\n",
    "#include <cuda_runtime.h>\r\n#include <cuda.h>\r\n",
    '// #include "/etc/passwd"\n',
    '/* #include "/etc/passwd"\n#include "/etc/passwd"\n */\n',
    '// a comment continued \\\n#include "/etc/passwd"\n',  # the second line is part of the comment
    'const char *s = "#include \\"/etc/passwd\\"";\n',
    'const char *s = "abc\\\n#include \\"x\\"";\n',  # the continuation keeps the include in the string
    "char c = '#';\n",
    'auto s = R"delim(\n)" #include "x" \n)delim";\n',
    "int x = 1'000'000; /* '\n#include \"/etc/passwd\"\n*/\n",  # digit separators: the comment is a comment
    'printf("use .incbin to embed a file\\n");\n',
    "#pragma unroll\n#pragma unroll 4\n#pragma once\n#pragma GCC unroll 8\n#pragma GCC diagnostic push\n",
    "#pragma nv_diag_suppress 177\n#pragma message(\"hello\")\n",
    '_Pragma("unroll")\n',
    'void f() { unsigned r; asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); }\n',
    'void f() { asm("membar.gl;"); }\n',
    "#define TILE_SIZE 16\n#if TILE_SIZE > 8\n#elif 0\n#else\n#endif\n#undef TILE_SIZE\n#error no\n#warning hm\n",
    "#define S(x) #x\n#define T S(tile)\n",
    "#\n#   \n",
    "#line 12\n",
    "int include = 3; int import = include < 4;\n",
    "#if 0\nit's a note, don't mind the apostrophes\n#endif\n",
])
def test_accepted(source):
    assert check_source(source) == []


def test_every_default_header_is_allowed():
    source = "".join(f"#include <{name}>\n" for name in DEFAULT_ALLOWED_HEADERS) + KERNEL
    assert check_includes(source) == []


def test_a_list_in_the_config_narrows_the_headers():
    assert check_includes("#include <cuda_fp16.h>\n", [*DEFAULT_ALLOWED_HEADERS, "cuda_fp16.h"]) == []
    narrowed = only("#include <stdio.h>\n", ["cuda_runtime.h"])
    assert narrowed.reason == "<stdio.h> is not one of the headers this lab allows"
    # Path checks come before the list: a bad entry in the configuration cannot allow a path.
    assert only("#include </etc/passwd>\n", ["/etc/passwd"]).reason == "absolute paths are not allowed in header names"


def test_template_reference_and_corpus_are_accepted():
    files = [ROOT / "student_template" / "kernel.cu", *sorted((ROOT / "reference").glob("*.cu")),
             *sorted((ROOT / "tests" / "submissions").glob("*/kernel.cu"))]
    # hip_port is named as HIP before this check runs; include_refused is refused on purpose
    files = [f for f in files if f.parent.name not in ("hip_port", "include_refused")]
    assert len(files) > 3
    for file in files:  # an ECE408 file passes once the preset's host-only headers are dropped
        violations = check_source(drop_host_headers(file.read_text(), ["wb.h", "gputk.h"]))
        if file.parent.name == "paste_helper_macro":  # accepted once its macros are expanded (test_token_pasting)
            assert needs_expansion(violations), violations
        else:
            assert violations == [], file


@pytest.mark.parametrize("line, dropped", [
    ("#include <wb.h>", True),
    ('#include "wb.h"', True),
    ("  #  include <gputk.h>   // libwb's successor", True),
    ('#include "../wb.h"', True),  # whatever folder the line names: the header is never read
    ('#include "../libwb/wb.h"', True),
    ("#include <wbx.h>", False),
    ("#include WB_HEADER", False),
])
def test_only_a_plain_include_of_a_host_only_header_is_dropped(line, dropped):
    source = f"{line}\n__global__ void k() {{}}\n"
    kept = drop_host_headers(source, ["wb.h", "gputk.h"])
    assert kept.count("\n") == source.count("\n")  # lines stay where the student wrote them
    assert (check_source(kept) == []) is dropped and (line not in kept) is dropped


def test_a_host_only_header_on_a_continued_line_is_not_dropped():
    source = '// a comment that goes on \\\n#include "wb.h"\n#include "secret.h"\n'
    kept = drop_host_headers(source, ["wb.h"])
    assert '#include "wb.h"' in kept and check_source(kept) != []


# --- #line ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "reason"), [
    ('#line 5 "evil.cu"\n', "it names a file, so messages would point at another file"),
    ('#line 1 "kernel.cu"\n', "it names a file, so messages would point at another file"),
    ('# 12 "x.cu" 1 3\n', "it names a file, so messages would point at another file"),
    ("#line FOO\n", "only a plain line number may follow #line"),
    ("#line 5 FILE\n", "only a plain line number may follow #line"),
    ("#line\n", "only a plain line number may follow #line"),
    ("#line 0x10\n", "only a plain line number may follow #line"),
    ('#li\\\nne 5 "evil.cu"\n', "it names a file, so messages would point at another file"),
    ('%:line 5 "evil.cu"\n', "it names a file, so messages would point at another file"),
])
def test_line_directives(source, reason):
    violations = line_directive_violations(source)
    assert [(v.line, v.reason, v.kind) for v in violations] == [(1, reason, LINE)]
    assert check_includes(source) == []  # #line is only line_directive_violations' business


def test_plain_line_numbers_are_allowed():
    assert line_directive_violations("#line 40\n# 7\nint x;\n") == []


def test_check_source_has_both():
    source = '#include "a.h"\n#line 3 "b.cu"\n'
    assert [(v.line, v.kind) for v in check_source(source)] == [(1, INCLUDE), (2, LINE)]


# --- the student's message ------------------------------------------------------------------------


def test_describe():
    violations = check_source('#include <stdio.h>\n#include "/etc/passwd"\n#line 9 "x.cu"\n')
    assert describe(violations, ["stdio.h", "cuda_runtime.h"]) == (
        "kernel.cu is not compiled: these lines could make the compiler read other files on the grading machine.\n"
        'line 2: #include "/etc/passwd" is not allowed: ' + ABSOLUTE + "\n"
        'line 3: #line 9 "x.cu" is not allowed: it names a file, so messages would point at another file\n'
        "Only these headers may be included: <stdio.h>, <cuda_runtime.h>")


def test_describe_without_include_problems_has_no_header_list():
    text = describe(check_source("#pragma GCC dependency \"x\"\n"))
    assert "may be included" not in text and text.endswith("#pragma GCC dependency can open files")


def test_describe_is_capped_and_empty_without_violations():
    assert describe([]) == ""
    text = describe(check_includes("".join(f'#include "f{i}.h"\n' for i in range(15))))
    assert "line 10:" in text and "line 11:" not in text and "... and 5 more" in text


# --- where a header resolves ----------------------------------------------------------------------

REAL_LAB_INCLUDES = ['#include "cuda_runtime.h"', "#include <cuda_runtime_api.h>", "#include <device_functions.h>",
                     "#include <fstream>", "#include <bits/stdc++.h>", "#include <cooperative_groups.h>",
                     '#include "device_launch_parameters.h"', "#include <cuda/std/cstdint>", "#include <unistd.h>"]


@needs_nvcc
@pytest.mark.parametrize("line", REAL_LAB_INCLUDES)
def test_toolkit_and_compiler_headers_are_allowed_however_they_are_written(line):
    assert check_source(f"{line}\n{KERNEL}") == []


@needs_nvcc
def test_the_folders_are_the_toolkits_and_the_compilers():
    folders = include_folders()
    assert any(Path(f, "cuda_runtime.h").is_file() for f in folders)
    assert any(Path(f, "stdio.h").is_file() for f in folders)
    assert "/etc" not in folders and not any(f.startswith("/proc") for f in folders)


def test_a_header_that_leads_out_of_the_folders_through_a_link_is_refused(tmp_path):
    folder = tmp_path / "include"
    folder.mkdir()
    (folder / "fine.h").write_text("int fine;\n")
    (folder / "innocent.h").symlink_to("/etc/passwd")
    policy = HeaderPolicy((str(folder),))
    assert check_includes("#include <fine.h>\n", policy=policy) == []
    violation = only_with('#include "innocent.h"\n', policy)
    assert violation.reason == '"innocent.h" leads outside the CUDA toolkit\'s and the compiler\'s include folders'


def test_a_handed_in_header_is_allowed_quoted_only(tmp_path):
    policy = HeaderPolicy((str(tmp_path),), handed_in=frozenset({"helpers.cuh"}))
    assert check_includes('#include "helpers.cuh"\n', policy=policy) == []
    assert "is not a header" in only_with("#include <helpers.cuh>\n", policy).reason
    text = describe(check_source('#include "x.h"\n', handed_in=["helpers.cuh"]), handed_in=["helpers.cuh"])
    assert '"x.h" is not a header of the CUDA toolkit or the C/C++ compiler or a file handed in' in text
    assert text.endswith('the files handed in with kernel.cu: "helpers.cuh"')


def test_without_a_toolkit_the_lab_headers_are_allowed_by_name(tmp_path):
    policy = HeaderPolicy((), toolkit=False)  # a machine with no nvcc (nor g++) to ask
    assert check_includes("#include <cuda_runtime.h>\n#include <device_functions.h>\n", policy=policy) == []
    assert only_with("#include <unistd.h>\n", policy).reason == "<unistd.h> is not one of the headers this lab allows"
    with_gxx = HeaderPolicy((str(tmp_path),), toolkit=False)  # g++ alone: its folders, and the toolkit's names
    (tmp_path / "fstream").write_text("")
    assert check_includes('#include <fstream>\n#include "cuda_runtime.h"\n', policy=with_gxx) == []


def test_the_student_is_told_what_may_be_included():
    text = describe(check_source('#include "x.h"\n'))
    assert text.endswith("Headers of the CUDA toolkit and of the C/C++ compiler may be included, by their names "
                         "(#include <cuda_runtime.h>, #include <cstdio>), never by a path")


def only_with(source: str, policy) -> IncludeViolation:
    violations = check_includes(source, policy=policy)
    assert len(violations) == 1, violations
    return violations[0]


def test_the_folders_asked_ahead_are_the_ones_asked_when_needed_and_each_compiler_is_asked_once(monkeypatch):
    """`grade` asks the compilers for their folders on a thread as it starts (ask_folders_soon): the static check
    then reads that answer, the same as one asked there, without asking again."""
    import os
    import subprocess
    import threading

    from conftest import machine_path

    from grader.source import include_policy

    with machine_path(os.environ["PATH"]):
        asked_when_needed = include_folders()
    asked_by: list[tuple[str, str]] = []
    run = subprocess.run

    def noted(command, **options):  # the real compiler runs: only who asked is noted
        asked_by.append((command[0], threading.current_thread().name))
        return run(command, **options)

    with machine_path(os.environ["PATH"]):
        monkeypatch.setattr(include_policy.subprocess, "run", noted)
        include_policy.ask_folders_soon()
        assert include_folders() == include_folders() == asked_when_needed
    assert asked_by and all(thread == "include-folders" for _, thread in asked_by)
    assert len({compiler for compiler, _ in asked_by}) == len(asked_by)  # none asked twice
    assert include_policy._FOLDERS._pending == []
