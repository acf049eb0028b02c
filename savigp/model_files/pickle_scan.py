"""A model file's pickle read as opcodes, without building anything, so that what it would build is
bounded before ``torch.load`` builds it (:func:`savigp.model_files.file_format.read_model_file`).

Unpickling is the costly part of reading a file (``torch.load(weights_only=True)``'s unpickler
runs in Python: about 1 s per million objects here, the opcode scan about 0.4 s): a 7.8 MB file
whose kernel spec held 3.9 million integers in one list cost 5.5 s of CPU before the schema refused
the list (it allows 4096 values per option). :func:`scan_pickle` follows the pickle machine's stack
(each opcode's ``stack_before`` and ``stack_after``, :mod:`pickletools`), with the containers it
builds and the memo, and refuses, in the order met,

* more than ``max_ops`` opcodes (each builds at most one object);
* a list, dict or set of more than ``max_items`` items (:data:`savigp.model_files.fields.MAX_ITEMS`,
  the most any container of a configuration may hold): the 3.9-million list is refused after its
  first million items, in 0.5 s, before anything is built;
* a stack of more than ``max_stack`` entries: values nested thousands deep (a dict's level takes
  two entries, a list's one; 100,000 levels fit in 0.9 MB), which no model file holds (its values
  nest a few levels; a batch of 1000 items stands on the stack at once).
"""
from __future__ import annotations

import pickletools
from typing import Optional

#: the most entries the pickle machine's stack may hold (items of one batch, 1000, and the nesting)
MAX_STACK = 10_000
_MARK = pickletools.markobject
#: opcodes that add the items above their mark to the container below it (SETITEMS: pairs)
_ADD = {"APPENDS": 1, "ADDITEMS": 1, "SETITEMS": 2}
#: opcodes that add one item (or one pair) to the container below it
_ADD_ONE = {"APPEND": 1, "SETITEM": 2}
#: opcodes that build a container of the items above their mark
_BUILD = {"LIST": 1, "DICT": 2, "FROZENSET": 1}


class _Container:
    """A list, dict or set the pickle builds: how many items it has been given."""

    __slots__ = ("items",)

    def __init__(self, items: int = 0):
        self.items = items


def _action(op) -> tuple:
    """``(kind, taken, pushed)`` of an opcode for :func:`scan_pickle`: what it does to the stack."""
    name, before, after = op.name, op.stack_before, op.stack_after
    if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
        return "memo", 0, 0
    if name in ("GET", "BINGET", "LONG_BINGET"):
        return "get", 0, 1
    if name == "MARK":
        return "mark", 0, 0
    if _MARK in before:
        return ("add" if name in _ADD else "build" if name in _BUILD else "slice"), before.index(_MARK), len(after)
    if name in _ADD_ONE:
        return "add one", len(before), 1
    if name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
        return "empty", 0, 1
    if name == "DUP":
        return "dup", 1, 2
    return ("push" if not before and len(after) == 1 else "other"), len(before), len(after)


_ACTIONS = {op: _action(op) for op in pickletools.opcodes}


def scan_pickle(data: bytes, max_ops: int, max_items: int, max_stack: int = MAX_STACK) -> Optional[str]:
    """Why the pickle ``data`` is refused unread (the module docstring's bounds), or None.

    Raises:
        Exception: a damaged pickle (an unknown opcode, a truncated argument, a stack that runs out):
            the caller says that the file is damaged.
    """
    stack: list = []
    marks: list = []
    memo: dict = {}
    for ops, (op, arg, _) in enumerate(pickletools.genops(data), 1):
        kind, taken, pushed = _ACTIONS[op]
        if kind == "push":  # (most opcodes: a number, a string, a constant)
            stack.append(None)
        elif kind == "memo":
            memo[len(memo) if arg is None else arg] = stack[-1]
        elif kind == "get":
            stack.append(memo[arg])
        elif kind == "mark":
            marks.append(len(stack))
        elif kind in ("add", "build", "slice"):
            top = marks.pop()
            n = len(stack) - top
            del stack[top:]
            below = stack[len(stack) - taken:] if taken else []
            if taken:
                del stack[len(stack) - taken:]
            if kind == "add" and isinstance(below[0], _Container):
                below[0].items += n // _ADD[op.name]
                if below[0].items > max_items:
                    return _too_many(max_items)
                stack.append(below[0])
            elif kind == "build":
                stack.append(_Container(n // _BUILD[op.name]))
            else:
                stack.extend([None] * pushed)
        else:
            if len(stack) < taken:
                raise IndexError("stack underflow")
            args = stack[len(stack) - taken:] if taken else []
            if taken:
                del stack[len(stack) - taken:]
            if kind == "add one" and isinstance(args[0], _Container):
                args[0].items += 1
                if args[0].items > max_items:
                    return _too_many(max_items)
                stack.append(args[0])
            elif kind == "empty":
                stack.append(_Container())
            elif kind == "dup":
                stack += [args[0], args[0]]
            else:
                stack.extend([None] * pushed)
        if ops > max_ops:
            return f"its pickle builds more than {max_ops} objects; a model file's builds far fewer"
        if len(stack) > max_stack:
            return (f"its pickle stacks more than {max_stack} values: values nested thousands deep; a model "
                    "file's nest a few levels")
    return None


def _too_many(max_items: int) -> str:
    return f"its pickle builds a container of more than {max_items} items; a model file's hold far fewer"
