"""Reads the C++ (Itanium ABI) names nvcc gives kernels compiled with C++ linkage, as far as a lab's kernel
needs: the function's own name, the scope it is in, whether it is a template's instantiation, and its
parameter types in C spelling (`_Z7mysgemmiiiPKfS0_Pf` is mysgemm(int, int, int, const float *,
const float *, float *)). Pure Python: the grader needs no cu++filt.

A name this reader cannot follow to its end (operators, function types, expressions in template
arguments) gives None, or parameters None, never a guess: the caller then knows less, not something
wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

BUILTIN = {
    "v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
    "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long", "x": "long long",
    "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float", "d": "double",
    "e": "long double", "g": "__float128", "z": "...",
}
BUILTIN_D = {"Dh": "half", "Dn": "decltype(nullptr)", "Di": "char32_t", "Ds": "char16_t", "Du": "char8_t"}
QUALIFIER = {"r": "__restrict__", "V": "volatile", "K": "const"}
SEQ_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ANONYMOUS = "_GLOBAL__N"  # how an unnamed namespace is spelled in a name


@dataclass(frozen=True)
class Demangled:
    name: str  # the function's own name: "mysgemm"
    scope: tuple[str, ...]  # the namespaces (or classes) around it, outermost first
    template_arguments: tuple[str, ...] | None  # `mysgemm<16>`'s ("16",); None: not a template's instantiation
    parameters: tuple[str, ...] | None  # C spellings; None when a type is beyond this reader

    @property
    def template(self) -> bool:
        return self.template_arguments is not None

    @property
    def qualified(self) -> str:
        arguments = f"<{', '.join(self.template_arguments)}>" if self.template_arguments is not None else ""
        scope = ("(anonymous namespace)" if part.startswith(ANONYMOUS) else part for part in self.scope)
        return "::".join((*scope, self.name)) + arguments

    def readable(self) -> str:
        """As a student wrote it: `ns::mysgemm(int, int, int, const float *, const float *, float *)`."""
        return f"{self.qualified}({', '.join(self.parameters) if self.parameters is not None else '…'})"


class _Unreadable(Exception):
    """A part of the name this reader does not follow."""


def demangle(symbol: str) -> Demangled | None:
    """The mangled function name read; None for a plain (extern "C") name or one this reader cannot follow."""
    if not symbol.startswith("_Z"):
        return None
    reader = _Reader(symbol, 2)
    try:
        scope, name, template = reader.function_name()
    except (_Unreadable, IndexError, ValueError):
        return None
    try:
        parameters: tuple[str, ...] | None = reader.parameters(template)
    except (_Unreadable, IndexError, ValueError):
        parameters = None
    return Demangled(name, scope, tuple(reader.arguments) if template else None, parameters)


class _Reader:
    def __init__(self, text: str, at: int):
        self.text, self.at = text, at
        self.substitutions: list[str] = []  # S_, S0_, S1_, ...: what the name has spelled so far
        self.arguments: list[str] = []  # the function template's arguments: T_, T0_, T1_, ...

    def peek(self, count: int = 1) -> str:
        return self.text[self.at:self.at + count]

    def take(self, count: int = 1) -> str:
        part = self.text[self.at:self.at + count]
        if len(part) < count:
            raise _Unreadable("the name ends early")
        self.at += count
        return part

    def done(self) -> bool:
        return self.at >= len(self.text) or self.peek() == "."  # `.constprop.0` and the like: a clone's suffix

    # -- the function's name ------------------------------------------------------------------------

    def function_name(self) -> tuple[tuple[str, ...], str, bool]:
        if self.peek() == "L":  # internal linkage (a `static` function), as GCC spells it
            self.take()
        if self.peek() == "N":
            return self.nested_name()
        name = self.source_name()
        if self.peek() != "I":
            return (), name, False
        self.substitutions.append(name)  # an unscoped template's name is a candidate
        self.arguments = self.template_arguments()
        return (), name, True

    def nested_name(self) -> tuple[tuple[str, ...], str, bool]:
        self.take()  # N
        while self.peek() in ("r", "V", "K", "R", "O"):  # a member function's qualifiers: no kernel has them
            self.take()
        parts: list[str] = []
        template = False
        while self.peek() != "E":
            if template:
                raise _Unreadable("a template's member")
            substituted = self.peek() == "S"
            if substituted:
                parts.append(self.substitution())
            elif self.peek() == "I":
                self.substitutions.append("::".join(parts))
                self.arguments = self.template_arguments()
                template = True
                continue
            else:
                parts.append(self.source_name())
            if self.peek() not in ("E", "I") and not substituted:
                self.substitutions.append("::".join(parts))  # a prefix of something longer: a candidate
        self.take()  # E
        if not parts:
            raise _Unreadable("an empty nested name")
        return tuple(parts[:-1]), parts[-1], template

    def source_name(self) -> str:
        digits = ""
        while self.peek().isdigit():
            digits += self.take()
        if not digits:
            raise _Unreadable(f"no name at {self.at}")
        return self.take(int(digits))

    def substitution(self) -> str:
        self.take()  # S
        if self.peek() == "t":
            self.take()
            return "std::" + self.source_name()
        seq = ""
        while self.peek() != "_":
            character = self.take()
            if character not in SEQ_DIGITS:
                raise _Unreadable("a standard abbreviation")
            seq += character
        self.take()  # _
        index = 0 if not seq else _base36(seq) + 1
        if index >= len(self.substitutions):
            raise _Unreadable("a substitution past the table")
        return self.substitutions[index]

    def template_arguments(self) -> list[str]:
        self.take()  # I
        arguments = []
        while self.peek() != "E":
            if self.peek() == "L":
                arguments.append(self.literal())
            elif self.peek() in ("X", "J"):
                raise _Unreadable("an expression or a pack as a template argument")
            else:
                arguments.append(self.type())
        self.take()  # E
        return arguments

    def literal(self) -> str:
        self.take()  # L
        if self.peek() == "_":
            raise _Unreadable("an external name as a template argument")
        self.type()
        value = ""
        while self.peek() != "E":
            value += self.take()
        self.take()  # E
        return value.replace("n", "-", 1)

    # -- types -----------------------------------------------------------------------------------

    def parameters(self, template: bool) -> tuple[str, ...]:
        if template:
            self.type()  # a function template's instantiation spells its return type first
        types = []
        while not self.done():
            types.append(self.type())
        return () if types == ["void"] else tuple(types)

    def type(self) -> str:
        first = self.peek()
        if first in BUILTIN:
            self.take()
            return BUILTIN[first]
        if self.peek(2) in BUILTIN_D:
            return BUILTIN_D[self.take(2)]
        if first in QUALIFIER:
            qualifiers = []
            while self.peek() in QUALIFIER:
                qualifiers.append(QUALIFIER[self.take()])
            return self.candidate(_qualified(self.type(), reversed(qualifiers)))
        if first in ("P", "R", "O"):
            self.take()
            return self.candidate(_declarator(self.type(), {"P": "*", "R": "&", "O": "&&"}[first]))
        if first == "S":
            named = self.substitution()
            return self.template_id(named) if self.peek() == "I" else named
        if first == "T":
            return self.candidate(self.template_parameter())
        if first == "N" or first.isdigit():
            return self.class_name()
        raise _Unreadable(f"a type this reader does not follow ({first!r})")

    def candidate(self, spelled: str) -> str:
        self.substitutions.append(spelled)
        return spelled

    def template_parameter(self) -> str:
        """T_ is the function template's first argument, T0_ its second, ..."""
        self.take()  # T
        seq = ""
        while self.peek() != "_":
            seq += self.take()
        self.take()
        index = 0 if not seq else int(seq) + 1
        if index >= len(self.arguments):
            raise _Unreadable("a template parameter of an enclosing template")
        return self.arguments[index]

    def class_name(self) -> str:
        if self.peek() == "N":
            scope, name, template = self.nested_name()
            if template:
                raise _Unreadable("a nested template class")
            return self.candidate("::".join((*scope, name)))
        name = self.candidate(self.source_name())
        return self.template_id(name) if self.peek() == "I" else name

    def template_id(self, name: str) -> str:
        arguments = self.template_arguments()
        return self.candidate(f"{name}<{', '.join(arguments)}>")


def _qualified(spelled: str, qualifiers) -> str:
    words = " ".join(qualifiers)
    return f"{spelled} {words}" if spelled.endswith(("*", "&")) else f"{words} {spelled}"


def _declarator(spelled: str, mark: str) -> str:
    return f"{spelled}{mark}" if spelled.endswith(("*", "&")) else f"{spelled} {mark}"


def _base36(digits: str) -> int:
    value = 0
    for character in digits:
        value = value * 36 + SEQ_DIGITS.index(character)
    return value
