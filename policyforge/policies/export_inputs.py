"""Exported graphs refuse inputs of the wrong shape or dtype with a message that names the expected shape.

A traced graph takes what it is given: a TorchScript graph traced for obs [B, 3] ran on [B, 1, 3] and returned
actions of the wrong rank, and onnxruntime's own refusal names one dimension ("Invalid rank for input: obs
Got: 3 Expected: 2"). So the TorchScript graph is wrapped, inside the saved file, by a scripted check of its
inputs (C++ deployments loading it get the same check), and an ONNX session is wrapped on load
(`checked_session`) by the same check against the graph's declared inputs. The message, either way:

    input 'obs' must be [B, 7] float32 (B ≥ 1), got [2, 1, 7] float32
"""

from typing import List, Optional  # noqa: UP035  TorchScript compiles these annotations

import numpy as np
import torch
from torch import nn

ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(uint8)": "uint8",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
}
"""numpy dtype of each onnxruntime input type (the graphs here take float32 states, uint8 images and a VLA's int32
instruction token ids)."""


def expected_text(name: str, shape: List[int], dtype: str) -> str:  # noqa: UP006
    """The start of the message for input `name` whose per-sample shape is `shape`."""
    return f"input {name!r} must be [{', '.join(['B', *map(str, shape)])}] {dtype} (B ≥ 1), got "


def _check(x: torch.Tensor, shape: List[int], dtype: torch.dtype, expected: str) -> None:  # noqa: UP006
    """Raise ValueError(`expected` + x's shape) unless x is [B ≥ 1, *shape] of `dtype` (scripted into the graph)."""
    ok = x.dim() == len(shape) + 1 and x.dtype == dtype and x.shape[0] >= 1
    if ok:
        for i in range(len(shape)):
            if x.shape[i + 1] != shape[i]:
                ok = False
    if not ok:
        got = "[" + ", ".join([str(size) for size in x.shape]) + "]"
        raise ValueError(expected + got + ("" if x.dtype == dtype else " of another dtype"))


class CheckedState(nn.Module):
    """A traced graph of one input (obs), its input checked first."""

    def __init__(self, graph: nn.Module, example: torch.Tensor, name: str):
        super().__init__()
        self.graph, self.shape, self.dtype = graph, list(example.shape[1:]), example.dtype
        self.expected = expected_text(name, self.shape, str(example.dtype)[6:])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        _check(obs, self.shape, self.dtype, self.expected)
        return self.graph(obs)


class CheckedPair(nn.Module):
    """A traced graph of two inputs (obs and an image or a base action), both checked first."""

    def __init__(self, graph: nn.Module, examples: List[torch.Tensor], names: List[str]):  # noqa: UP006
        super().__init__()
        self.graph = graph
        self.shape0, self.dtype0 = list(examples[0].shape[1:]), examples[0].dtype
        self.shape1, self.dtype1 = list(examples[1].shape[1:]), examples[1].dtype
        self.expected0 = expected_text(names[0], self.shape0, str(self.dtype0)[6:])
        self.expected1 = expected_text(names[1], self.shape1, str(self.dtype1)[6:])

    def forward(self, obs: torch.Tensor, extra: Optional[torch.Tensor] = None) -> torch.Tensor:  # noqa: UP045
        _check(obs, self.shape0, self.dtype0, self.expected0)
        if extra is None:
            raise ValueError(self.expected1 + "nothing")
        _check(extra, self.shape1, self.dtype1, self.expected1)
        return self.graph(obs, extra)


class CheckedTriple(nn.Module):
    """A traced graph of three inputs (a VLA's state, images and instruction), all checked first."""

    def __init__(self, graph: nn.Module, examples: List[torch.Tensor], names: List[str]):  # noqa: UP006
        super().__init__()
        self.graph = graph
        self.shapes = [list(example.shape[1:]) for example in examples]
        self.dtype0, self.dtype1, self.dtype2 = (example.dtype for example in examples)  # TorchScript: no List[dtype]
        self.expected = [
            expected_text(name, list(example.shape[1:]), str(example.dtype)[6:])
            for name, example in zip(names, examples, strict=True)
        ]

    def forward(self, obs: torch.Tensor, second: torch.Tensor, third: torch.Tensor) -> torch.Tensor:
        _check(obs, self.shapes[0], self.dtype0, self.expected[0])
        _check(second, self.shapes[1], self.dtype1, self.expected[1])
        _check(third, self.shapes[2], self.dtype2, self.expected[2])
        return self.graph(obs, second, third)


def checked_torchscript(traced: nn.Module, examples: list[torch.Tensor], names: list[str]) -> torch.jit.ScriptModule:
    """The traced graph `traced` behind a scripted check of its inputs, frozen (what `torch.jit.save` writes)."""
    wrappers = {1: CheckedState, 2: CheckedPair, 3: CheckedTriple}
    if len(examples) not in wrappers:
        raise ValueError(f"graphs of {len(examples)} inputs ({names}) have no input check; 1-3 do")
    if len(examples) == 1:
        wrapper: nn.Module = CheckedState(traced, examples[0], names[0])
    else:
        wrapper = wrappers[len(examples)](traced, examples, names)
    return torch.jit.freeze(torch.jit.script(wrapper.eval()))


def torchscript_error(err: Exception, label: str) -> Exception:
    """The input check's ValueError (starting with `label`) out of TorchScript's error, whose last line is its
    message; other errors as they are."""
    last = str(err).strip().splitlines()[-1] if str(err).strip() else ""
    prefix = "builtins.ValueError: "
    return ValueError(f"{label}: {last.removeprefix(prefix)}") if last.startswith(prefix) else err


def checked_session(session, label: str):
    """`session.run` for the graph's inputs given in order as numpy arrays, each checked first against the
    input the graph declares (ValueError starting with `label` and naming the expected shape); → action."""
    declared = [
        (i.name, [d if isinstance(d, int) else None for d in i.shape[1:]], np.dtype(ORT_DTYPES.get(i.type, "float32")))
        for i in session.get_inputs()
    ]
    names = [name for name, _, _ in declared]

    def fits(array: np.ndarray, shape: list[int | None], dtype: np.dtype) -> bool:
        if array.dtype != dtype or array.ndim != len(shape) + 1 or array.shape[0] < 1:
            return False
        return all(want is None or got == want for got, want in zip(array.shape[1:], shape, strict=True))

    def run(*arrays: np.ndarray) -> np.ndarray:
        if len(arrays) != len(declared):
            raise ValueError(f"{label}: the graph takes {len(declared)} inputs {names}, got {len(arrays)}")
        for array, (name, shape, dtype) in zip(arrays, declared, strict=True):
            if not fits(np.asarray(array), shape, dtype):
                sizes = ", ".join(str(size) for size in ["B", *(d if d is not None else "?" for d in shape)])
                got = np.asarray(array)
                raise ValueError(
                    f"{label}: input {name!r} must be [{sizes}] {dtype} (B ≥ 1), got {list(got.shape)} {got.dtype}"
                )
        return session.run(None, dict(zip(names, arrays, strict=True)))[0]

    return run
