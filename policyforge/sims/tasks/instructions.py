"""The language of `arm-instructed`: task families, object and target words, paraphrase templates, held-out sets.

An instruction is four integer ids, kept per env in the task's variables (int32 [N] each), so the pure task
functions read them on every backend (MJX included):

    family      index into FAMILIES                     (lift, push, place, touch)
    object      index into CUBE_COLOURS                 the cube the instruction names
    target      index into ZONES for push, into PAD_COLOURS for place, 0 for lift and touch
    paraphrase  index into TEMPLATES[family]            how the instruction is worded

`render` turns ids into text on the host, `parse` text back into ids (e.g. a dataset's tasks into families), and
`groups` names the family and instruction set of a text (evaluation reports success per group).
Held out for evaluation only: the template `HELDOUT_PARAPHRASE` of every family, and the (family, object, target)
combinations in `HELDOUT_COMBINATIONS` (every word of a held-out combination is seen in training, only not
together). `instruction_table(instructions, families)` lists the rows
(family, object, target, paraphrase) one instruction set samples from:

    train                 seen combinations × seen paraphrases
    heldout_paraphrase    seen combinations × the held-out paraphrase
    heldout_combination   held-out combinations × seen paraphrases
    all                   every combination × every paraphrase
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from policyforge.sims.task import Array, Sampler, Xp

Family = Literal["lift", "push", "place", "touch"]
InstructionSet = Literal["train", "heldout_paraphrase", "heldout_combination", "all"]

FAMILIES: tuple[Family, ...] = ("lift", "push", "place", "touch")
"""Task families, in id order."""
CUBE_COLOURS = ("red", "green", "blue")
"""Colours of the cubes, in id order (the cubes differ only in colour)."""
ZONES = ("left", "right", "front")
"""Push targets: table zones left and right of the cubes (seen from the robot) and in front, away from the robot."""
PAD_COLOURS = ("yellow", "purple", "white")
"""Colours of the target pads, in id order."""
TEMPLATES: dict[Family, tuple[str, ...]] = {
    "lift": (
        "lift the {cube} cube",
        "pick up the {cube} cube",
        "raise the {cube} block off the table",
        "grab the {cube} cube and lift it up",
        "hold the {cube} block up in the air",
    ),
    "push": (
        "push the {cube} cube to the {target} zone",
        "slide the {cube} cube into the {target} area",
        "move the {cube} block to the {target} zone without lifting it",
        "shove the {cube} cube over to the {target} side",
        "nudge the {cube} block along the table into the {target} region",
    ),
    "place": (
        "put the {cube} cube on the {target} pad",
        "place the {cube} cube onto the {target} pad",
        "pick up the {cube} block and set it down on the {target} pad",
        "move the {cube} cube onto the {target} square",
        "carry the {cube} block over to the {target} pad and leave it there",
    ),
    "touch": (
        "touch the {cube} cube",
        "reach for the {cube} cube",
        "move the gripper to the {cube} block",
        "go to the {cube} cube",
        "bring your fingers around the {cube} block",
    ),
}
"""Paraphrase templates of each family; `{cube}` is the cube's colour, `{target}` the zone or pad word."""
HELDOUT_PARAPHRASE = 4
"""Template index held out of training in every family (the last one)."""
HELDOUT_COMBINATIONS: frozenset[tuple[Family, str, str | None]] = frozenset(
    {
        ("lift", "blue", None),
        ("touch", "red", None),
        ("push", "red", "front"),
        ("push", "blue", "left"),
        ("place", "green", "yellow"),
        ("place", "blue", "white"),
    }
)
"""(family, cube colour, target word) combinations held out of training; each word is trained in other pairs."""
ID_NAMES = ("family", "object", "target", "paraphrase")
"""Names of the id variables in the task's variables, in the column order of instruction tables."""


def target_words(family: Family) -> tuple[str | None, ...]:
    """The target words of a family: zones for push, pad colours for place, (None,) for lift and touch."""
    return {"push": ZONES, "place": PAD_COLOURS}.get(family, (None,))


def instruction_table(instructions: InstructionSet, families: Sequence[Family] = FAMILIES) -> np.ndarray:
    """Rows (family, object, target, paraphrase) int32 [M, 4] of one instruction set, restricted to `families`."""
    rows = []
    for family in families:
        f = FAMILIES.index(family)
        for o, cube in enumerate(CUBE_COLOURS):
            for t, target in enumerate(target_words(family)):
                heldout_combination = (family, cube, target) in HELDOUT_COMBINATIONS
                for p in range(len(TEMPLATES[family])):
                    heldout_paraphrase = p == HELDOUT_PARAPHRASE
                    keep = {
                        "train": not heldout_combination and not heldout_paraphrase,
                        "heldout_paraphrase": not heldout_combination and heldout_paraphrase,
                        "heldout_combination": heldout_combination and not heldout_paraphrase,
                        "all": True,
                    }[instructions]
                    if keep:
                        rows.append((f, o, t, p))
    return np.array(rows, dtype=np.int32).reshape(-1, 4)


def family_balanced_cdf(table: np.ndarray) -> np.ndarray:
    """Cumulative probabilities [M] of the rows of an instruction table: every family present gets the same share,
    split evenly over its rows (so families with more combinations are not sampled more often)."""
    families, counts = np.unique(table[:, 0], return_counts=True)
    share = {int(f): 1.0 / (len(families) * c) for f, c in zip(families, counts, strict=True)}
    weights = np.array([share[int(f)] for f in table[:, 0]])
    return np.cumsum(weights) / weights.sum()


def sample_instructions(sampler: Sampler, n: int, table: np.ndarray, cdf: np.ndarray, xp: Xp) -> dict[str, Array]:
    """Ids of n instructions drawn from the rows of `table` with cumulative probabilities `cdf`: int32 [n] each
    under `family`, `object`, `target`, `paraphrase` (traces under jax.jit: no host round trip)."""
    index = xp.searchsorted(xp.asarray(cdf), sampler.uniform(0.0, 1.0, (n,)), side="right")
    rows = xp.asarray(table)[xp.minimum(index, len(table) - 1)]
    return {name: rows[:, i].astype(xp.int32) for i, name in enumerate(ID_NAMES)}


def render(family: int, cube: int, target: int, paraphrase: int) -> str:
    """The text of one instruction from its ids."""
    name = FAMILIES[family]
    word = target_words(name)[target]
    return TEMPLATES[name][paraphrase].format(cube=CUBE_COLOURS[cube], target=word)


def render_batch(ids: dict[str, Array]) -> list[str]:
    """Texts of N instructions from their id arrays ([N] each, under `ID_NAMES`; numpy or JAX)."""
    columns = [np.asarray(ids[name]).astype(np.int64) for name in ID_NAMES]
    return [render(*map(int, row)) for row in zip(*columns, strict=True)]


def texts(instructions: InstructionSet, families: Sequence[Family] = FAMILIES) -> list[str]:
    """Every distinct text of an instruction set, in table order."""
    return list(dict.fromkeys(render(*map(int, row)) for row in instruction_table(instructions, families)))


def parse(text: str) -> tuple[int, int, int, int]:
    """The ids (family, object, target, paraphrase) of an instruction text `render` produced (a dataset's task, an
    episode's instruction), e.g. to report success per family; ValueError naming the text if it is not one."""
    table = _ids_by_text()
    if text not in table:
        raise ValueError(
            f"instruction {text!r} is not one of arm-instructed's {len(table)} instructions "
            f"(e.g. {next(iter(table))!r}); texts are rendered from instructions.TEMPLATES"
        )
    return table[text]


def instruction_set(ids: tuple[int, int, int, int]) -> InstructionSet | None:
    """The held-out set an instruction's ids (family, object, target, paraphrase) belong to: `train`,
    `heldout_paraphrase`, `heldout_combination`, or None for a held-out wording of a held-out combination (only the
    set `all` draws those)."""
    family = FAMILIES[ids[0]]
    combination = (family, CUBE_COLOURS[ids[1]], target_words(family)[ids[2]]) in HELDOUT_COMBINATIONS
    paraphrase = ids[3] == HELDOUT_PARAPHRASE
    if combination and paraphrase:
        return None
    return "heldout_combination" if combination else "heldout_paraphrase" if paraphrase else "train"


def groups(text: str) -> list[str]:
    """The groups an instruction text is reported in: its family and, where it has one, its instruction set
    (e.g. ["lift", "heldout_paraphrase"]); ValueError naming the text if it is not an arm-instructed instruction."""
    ids = parse(text)
    named = instruction_set(ids)
    return [FAMILIES[ids[0]]] + ([named] if named is not None else [])


_IDS_BY_TEXT: dict[str, tuple[int, int, int, int]] = {}


def _ids_by_text() -> dict[str, tuple[int, int, int, int]]:
    if not _IDS_BY_TEXT:
        for row in instruction_table("all").tolist():
            _IDS_BY_TEXT[render(*row)] = (row[0], row[1], row[2], row[3])
    return _IDS_BY_TEXT
