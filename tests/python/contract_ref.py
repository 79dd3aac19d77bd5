"""A pure-Python model of the order contract (docs/order_contract.md) for bitwise checks: blocks of 32
folded left to right, then the same rule over the block results, each operation rounded to the accumulate
type (numpy float32 or float64 scalars)."""

import numpy as np

K_BLOCK = 32


def tree_reduce(values, acc=np.float32, combine=lambda a, b: a + b):
    """The contract's fixed tree over `values` (source order) with `combine`, in the accumulate type `acc`."""
    level = [acc(v) for v in values]
    assert level, "tree_reduce of no values"
    while True:
        sums = []
        for base in range(0, len(level), K_BLOCK):
            s = level[base]
            for v in level[base + 1:base + K_BLOCK]:
                s = acc(combine(s, v))
            sums.append(s)
        if len(level) <= K_BLOCK:
            return sums[0]
        level = sums


def tree_sum(values, acc=np.float32):
    """The contract's tree of rounded additions (the sum family)."""
    return tree_reduce(values, acc)


def tree_prod(values, acc=np.float32):
    """The contract's tree of rounded multiplications (reduce='prod')."""
    return tree_reduce(values, acc, lambda a, b: a * b)
