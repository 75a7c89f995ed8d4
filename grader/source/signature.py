"""What the student's kernel takes, read from its source, against how the lab launches it.

The launchers pass m, n and k as 32-bit ints and A, B and C as pointers to float, in the configured
order. A kernel declared otherwise would read garbage (a `double *` reads past the float buffers; a
`size_t` reads 64 bits of a 32-bit argument), and the student would be told "out-of-bounds read" for
what is a declaration mistake. So the declaration is checked first and told as what it is. Only what is
certainly wrong is reported: a type the parser cannot resolve (a typedef, a macro) is given the benefit
of the doubt. A HIP file is named as such.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..contract import MATRICES, WIDTH, KernelContract
from . import cuda_syntax as cs

# C spellings that are a 32-bit int, as the launchers pass them.
INT_TYPES = {"int", "signed", "signed int", "unsigned", "unsigned int", "int32_t", "uint32_t"}
PRIMITIVE = re.compile(r"^(?:(?:un)?signed\s+|short\s+|long\s+)*(?:void|bool|char|short|int|long|float|double|half|"
                       r"size_t|ptrdiff_t|u?int(?:8|16|32|64)_t|signed|unsigned|__half)$")
HIP = re.compile(r"#\s*include\s*[<\"](hip/[\w./]+)[>\"]"
                 r"|\b(hip(?:LaunchKernelGGL|Malloc|Memcpy|Free|DeviceSynchronize|GetLastError))\b")
# The CUDA spelling of what a HIP file uses.
CUDA_FOR_HIP = {"hipLaunchKernelGGL": "kernel<<<grid, block>>>(…)", "hipMalloc": "cudaMalloc",
                "hipMemcpy": "cudaMemcpy", "hipFree": "cudaFree", "hipDeviceSynchronize": "cudaDeviceSynchronize",
                "hipGetLastError": "cudaGetLastError"}
MAX_HIP_NAMED = 4


@dataclass(frozen=True)
class Parameter:
    base: str  # the type without qualifiers or pointers: "float", "double", "size_t", "real"
    name: str
    pointers: int
    text: str  # as the student wrote it


@dataclass(frozen=True)
class Definition:
    template: bool  # `template <...> __global__ void mysgemm(...)`
    parameters: tuple[Parameter, ...] | None  # None: the parser cannot read them
    scope: str = ""  # the namespaces around it, "lab::inner"


def kernel_parameters(source: str, kernel: str) -> list[Parameter] | None:
    """The parameters of the kernel's first definition that is not a template, or None when it has none the
    parser can read."""
    readable = [d.parameters for d in definitions(source, kernel) if not d.template and d.parameters is not None]
    return list(readable[0]) if readable else None


def definitions(source: str, kernel: str) -> list[Definition]:
    """Each `__global__` definition of the kernel (overloads, templates), in file order."""
    return [Definition(function.parent is not None and function.parent.type == "template_declaration",
                       _parameters_of(function), _namespaces_around(function))
            for function in cs.function_definitions(cs.parse(source).root_node)
            if cs.function_name(function) == kernel and cs.has_keyword(function, "__global__")]


def _namespaces_around(node) -> str:
    names = []
    while (node := node.parent) is not None:
        if node.type == "namespace_definition":
            name = node.child_by_field_name("name")
            names.insert(0, cs.text(name) if name is not None else "(anonymous namespace)")
    return "::".join(names)


def _parameters_of(function) -> tuple[Parameter, ...] | None:
    node = function.child_by_field_name("declarator")
    while node is not None and node.type != "function_declarator":
        node = node.child_by_field_name("declarator")
    params = node.child_by_field_name("parameters") if node is not None else None
    if params is None:
        return None
    return tuple(_parameter(p) for p in params.named_children
                 if p.type in ("parameter_declaration", "optional_parameter_declaration"))


def template_kernel_problem(kernel: str, instances: list[str] | None = None) -> str:
    """Why a kernel that is only a template cannot be graded, and what to write instead."""
    compiled = f" (compiled: {', '.join(instances)})" if instances else ""
    return (f"{kernel} is a template{compiled}: the lab launches {kernel} by its name, and a template kernel "
            f"has a name only with its template arguments. Make {kernel} a plain __global__ function; a "
            f"template may be a __device__ helper it calls, e.g. dot<TILE_SIZE>(...)")


def namespaced_kernel_problem(kernel: str, qualified: list[str]) -> str:
    """Why a kernel defined only inside a namespace is not the lab's, and what to change."""
    return (f"{kernel} is defined only inside a namespace ({', '.join(qualified)}); the lab launches {kernel} at "
            "file scope: move the kernel out of the namespace")


def _parameter(node) -> Parameter:
    base = " ".join(cs.text(c) for c in node.children
                    if c.type in ("primitive_type", "sized_type_specifier", "type_identifier"))
    declarator = node.child_by_field_name("declarator")
    return Parameter(base, cs.declared_name(declarator) or "", sum(cs.declarator_shape(declarator)),
                     " ".join(cs.text(node).split()))


def signature_problem(source: str, contract: KernelContract) -> str:
    """What is certainly wrong with the kernel's declaration for this lab, in words; '' when nothing is."""
    kernel = contract.name
    found = definitions(source, kernel)
    if found and all(d.template for d in found):
        return template_kernel_problem(kernel)
    if found and all(d.scope for d in found if not d.template):
        return namespaced_kernel_problem(kernel, [f"{d.scope}::{kernel}" for d in found if not d.template])
    problems = [_declaration_problem(list(d.parameters), contract) for d in found
                if not d.template and d.parameters is not None]
    # Of overloads, one the lab can launch is enough (the compiled module says which: kernel_params.py).
    return "" if not problems or "" in problems else problems[0]


def _declaration_problem(params: list[Parameter], contract: KernelContract) -> str:
    kernel, expected = contract.name, contract.signature
    if len(params) != len(contract.roles):
        found = ", ".join(p.text for p in params) or "nothing"
        return (f"{kernel} takes {len(params)} parameters ({found}); this lab launches it with "
                f"{len(contract.roles)}: ({expected})")
    for position, (param, role) in enumerate(zip(params, contract.roles), start=1):
        problem = _role_problem(param, role, kernel, position)
        if problem:
            return f"{problem}\nthis lab launches {kernel}({expected})"
    return ""


def _role_problem(param: Parameter, role: str, kernel: str, position: int) -> str:
    if not PRIMITIVE.match(param.base):
        return ""  # a typedef or macro: not known to be wrong
    if role in MATRICES:
        if param.pointers != 1:
            return (f"{kernel}'s parameter {position} is `{param.text}`; the lab passes the matrix {role} there, "
                    "a float *")
        if param.base != "float":
            return f"{kernel} takes {param.base} *{param.name}; this lab uses float"
        return ""
    if param.pointers or param.base not in INT_TYPES:
        return (f"{kernel}'s parameter {position} is `{param.text}`; the lab passes the size {role} there as a "
                "32-bit int")
    return ""


def hip_problem(source: str) -> str:
    """'' unless the file is HIP (AMD's CUDA dialect), which nvcc does not compile: then what it uses, at its
    lines, each with its CUDA spelling."""
    code = cs.without_comments(source, keep_lines=True)
    used: dict[str, int] = {}
    for match in HIP.finditer(code):
        used.setdefault(match.group(1) or match.group(2), code.count("\n", 0, match.start()) + 1)
    if not used:
        return ""
    named = [f"line {line} includes <{name}> (CUDA: <cuda_runtime.h>)" if name.startswith("hip/")
             else f"line {line} calls {name} (CUDA: {CUDA_FOR_HIP[name]})"
             for name, line in list(used.items())[:MAX_HIP_NAMED]]
    more = f" and {len(used) - MAX_HIP_NAMED} more" if len(used) > MAX_HIP_NAMED else ""
    return (f"this is HIP code, which nvcc does not compile: {'; '.join(named)}{more}. The lab needs CUDA: write "
            "those the CUDA way, or hand in the kernel alone")


def role_names(source: str, contract: KernelContract) -> list[tuple[str, str]]:
    """What the kernel calls each role, by its parameters, in their order: the matrices, and the sizes m, n, k,
    a size under each of its names (ECE408's numARows and numCRows are m; a square lab's one size is all three)."""
    parameters = kernel_parameters(source, contract.name) or []
    if len(parameters) != len(contract.roles):
        return []
    named = [(role, p.name) for role, p in zip(contract.roles, parameters) if p.name]
    return [(size, name) for role, name in named for size in (("m", "n", "k") if role == WIDTH else (role,))]


def matrix_names(source: str, contract: KernelContract) -> dict[str, str]:
    """What the kernel calls the matrices A, B and C (ECE408's M, N, P), by the parameters' roles."""
    return {role: name for role, name in role_names(source, contract) if role in ("A", "B", "C")}
