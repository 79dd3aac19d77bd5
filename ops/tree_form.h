// The three forms of the contract's tree (ops/contract.h) and the host's choice among them. NB: BlockFold (up
// to kBlock items), TwoLevelTree (up to kBlock^2) and StreamingTree (any count) give tree_reduce's bits for
// the same sequence (docs/order_contract.md), so a gather whose host knows the most contributions any
// destination of a call has picks the smallest form that holds them: each thread then carries only that
// form's state (BlockFold: one value; StreamingTree: a stack of open blocks).
#pragma once

#include <cstdint>

#include "ops/contract.h"

namespace detops {

enum class TreeForm : int { Block = 0, TwoLevel = 1, Streaming = 2 };

// The smallest form that holds `longest` contributions.
C10_HOST_DEVICE constexpr TreeForm tree_form_for(int64_t longest) {
  return longest <= kBlock ? TreeForm::Block : longest <= kBlock * kBlock ? TreeForm::TwoLevel : TreeForm::Streaming;
}

// f(tree) with an empty tree of the given form; returns what f returns. f is called with each form's type,
// so a caller that fixes one form per kernel instantiates f three times. f may be a host lambda (a host entry
// choosing its kernel) or a device one (a thread choosing its fold), hence no execution-space check.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename acc_t, typename F>
C10_HOST_DEVICE auto with_tree_form(TreeForm form, F&& f) {
  if (form == TreeForm::Block) return f(BlockFold<acc_t>());
  if (form == TreeForm::TwoLevel) return f(TwoLevelTree<acc_t>());
  return f(StreamingTree<acc_t>());
}

}  // namespace detops
