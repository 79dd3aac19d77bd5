// _index_put_impl_ (what index_put_, index_put, tensor[indices] = values, tensor[indices] += values and the
// backward of tensor[indices] dispatch to): checks, the destination rows, routing and the CPU path. The CUDA
// path is cuda/index_put.cu; both run the sort-reduce engine over ops/index_put_op.h: accumulate=True sums
// each destination's contributions by the contract's tree, accumulate=False keeps the last one in source
// order (docs/order_contract.md, docs/index_put.md).
//
// The index semantics are stock's (aten make_info, TensorAdvancedIndexing.cpp): masks become their nonzero
// coordinates (at::native::expandTensors), the index tensors broadcast together, the indexing result is
// the sizes before the first indexed dimension, the broadcast index shape and the sizes after the last one,
// or, when the indexed dimensions are not adjacent, the broadcast index shape followed by every other
// dimension in order. Stock's AdvancedIndex restriding is not exported, so the destination of each row of
// the result is computed here with ATen integer ops on self's device (no host synchronisation outside
// strict mode): one int64 per row of the result, a row being the product of the sizes after the last
// indexed dimension.
#include "ops/index_put.h"

#include "ops/common.h"
#include "ops/index_put_op.h"
#include "ops/put_op.h"  // put_add_dtype: accumulate=True sums the dtypes put_ sums
#include "ops/sort_reduce_cpu.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorOperators.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/ops/_index_put_impl_cpu_dispatch.h>
#include <ATen/ops/_index_put_impl_cuda_dispatch.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <sstream>
#include <string>
#include <vector>

namespace detops {
namespace {

constexpr const char* kOp = "_index_put_impl_";

// Stock's error for index values outside [-size, size): "index v is out of bounds for dimension i with size
// s", i counting the index tensors (after masks are expanded), for the first bad value in the broadcast
// index shape's row-major order. Where validates_on_host() only.
void check_index_bounds(const std::vector<at::Tensor>& defined, const std::vector<int64_t>& sizes) {
  if (defined.empty() || defined[0].numel() == 0 || !validates_on_host(defined[0])) return;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : defined) flat.push_back(t.reshape({-1}));
  const at::Tensor host = at::stack(flat, 1).cpu().contiguous();
  const int64_t* p = host.const_data_ptr<int64_t>();
  const int64_t k = static_cast<int64_t>(defined.size());
  const int64_t n = host.size(0);
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t v = p[e * k + i];
      TORCH_CHECK_INDEX(v >= -sizes[i] && v < sizes[i], kOp, "(): index ", v, " is out of bounds for dimension ", i,
                        " with size ", sizes[i]);
    }
  }
}

// The rows of the CPU path when the indexed dimensions are self's leading ones (no other dimension before
// the last indexed one): one pass over the index values (each index tensor on the CPU, kLong, broadcast to
// one shape) that checks them as check_index_bounds does, with its error for the same first bad value, and
// forms each row as the ATen integer ops of index_put_impl_ would: sum of the wrapped values times their
// dimensions' row strides. One int64 per element of the broadcast index shape.
at::Tensor leading_rows_cpu(const std::vector<at::Tensor>& defined, const std::vector<int64_t>& sizes,
                            const std::vector<int64_t>& strides) {
  const int64_t k = static_cast<int64_t>(defined.size());
  std::vector<at::Tensor> dense;
  std::vector<const int64_t*> values;
  for (const at::Tensor& t : defined) {
    dense.push_back(t.contiguous());
    values.push_back(dense.back().const_data_ptr<int64_t>());
  }
  at::Tensor rows = at::empty(defined[0].sizes(), defined[0].options().dtype(at::kLong));
  int64_t* out = rows.data_ptr<int64_t>();
  const int64_t n = rows.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t row = 0;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t v = values[i][e];
      TORCH_CHECK_INDEX(v >= -sizes[i] && v < sizes[i], kOp, "(): index ", v, " is out of bounds for dimension ", i,
                        " with size ", sizes[i]);
      row += (v < 0 ? v + sizes[i] : v) * strides[i];
    }
    out[e] = row;
  }
  return rows;
}

std::string shapes_as_str(const std::vector<at::Tensor>& tensors) {
  std::ostringstream os;
  bool first = true;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) os << ", ";
    os << t.sizes();
    first = false;
  }
  return os.str();
}

}  // namespace

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool /*unsafe*/) {
  // Stock's checks in stock's order (aten _index_put_impl_, make_info, make_index_put_iterator).
  TORCH_CHECK_INDEX(static_cast<int64_t>(indices.size()) <= self.dim(), kOp, "(): too many indices for tensor of ",
                    "dimension ", self.dim(), " (got ", indices.size(), ")");
  // NB: stock only warns on an expanded self; the last writer and the sums would race on shared elements.
  at::assert_no_internal_overlap(self);
  at::Tensor value = values;
  if (value.device() != self.device() && value.numel() == 1 && value.dim() == 0) value = value.to(self.device());
  at::assert_no_overlap(self, value);
  for (const std::optional<at::Tensor>& index : indices) {
    if (index.has_value() && index->defined()) at::assert_no_overlap(self, *index);
  }
  TORCH_CHECK(value.device() == self.device(), kOp, "(): expected device ", self.device(), " but got device ",
              value.device(), " for value tensor");
  if (accumulate && !put_add_dtype(self.scalar_type())) {
    // bool and complex sums: stock's kernel (on CUDA its sorted path, deterministic).
    return self.is_cuda() ? at::cuda::_index_put_impl_(self, indices, values, accumulate, false)
                          : at::cpu::_index_put_impl_(self, indices, values, accumulate, false);
  }
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  std::vector<at::Tensor> idx = at::native::expandTensors(self, indices, /*ensure_same_device=*/true);
  try {
    idx = at::expand_outplace(idx);
  } catch (const std::exception&) {
    TORCH_CHECK_INDEX(false, kOp, "(): shape mismatch: indexing tensors could not be broadcast together with ",
                      "shapes ", shapes_as_str(idx));
  }
  while (static_cast<int64_t>(idx.size()) < self.dim()) idx.emplace_back();
  std::vector<int64_t> positions;  // the indexed dimensions of self
  std::vector<at::Tensor> defined;
  std::vector<int64_t> indexed_sizes;
  for (int64_t d = 0; d < static_cast<int64_t>(idx.size()); ++d) {
    if (!idx[d].defined()) continue;
    if (idx[d].scalar_type() != at::kLong) idx[d] = idx[d].to(at::kLong);
    positions.push_back(d);
    defined.push_back(idx[d]);
    indexed_sizes.push_back(self.size(d));
  }
  TORCH_CHECK_INDEX(!positions.empty(), kOp, "(): at least one index must be a tensor");
  const bool adjacent = at::native::hasContiguousSubspace(idx);
  const at::IntArrayRef index_shape = defined[0].sizes();
  const int64_t first = positions.front();
  const int64_t last = positions.back();
  const int64_t ndim = self.dim();

  // The indexing result: `row_shape` (its dimensions up to the last indexed one's) then the trailing sizes.
  std::vector<int64_t> row_shape;
  std::vector<int64_t> slice_dims;  // the dimensions of self before `last` that are not indexed, in order
  for (int64_t d = 0; d < last; ++d) {
    if (!idx[d].defined()) slice_dims.push_back(d);
  }
  int64_t index_axis;  // where the broadcast index shape starts in the result
  if (adjacent) {
    for (int64_t d = 0; d < first; ++d) row_shape.push_back(self.size(d));
    index_axis = first;
    row_shape.insert(row_shape.end(), index_shape.begin(), index_shape.end());
  } else {
    index_axis = 0;
    row_shape.assign(index_shape.begin(), index_shape.end());
    for (int64_t d : slice_dims) row_shape.push_back(self.size(d));
  }
  std::vector<int64_t> result_shape = row_shape;
  int64_t inner = 1;
  for (int64_t d = last + 1; d < ndim; ++d) {
    result_shape.push_back(self.size(d));
    inner *= self.size(d);
  }
  TORCH_CHECK(at::is_expandable_to(value.sizes(), result_shape), kOp, "(): shape mismatch: value tensor of shape ",
              value.sizes(), " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(result_shape));
  TORCH_CHECK(value.scalar_type() == self.scalar_type(), kOp, "(): Index put requires the source and destination ",
              "dtypes match, got ", self.scalar_type(), " for the destination and ", value.scalar_type(),
              " for the source.");
  // Row strides of contiguous self in units of `inner`, up to the last indexed dimension.
  std::vector<int64_t> row_stride(last + 1);
  int64_t stride = 1;
  for (int64_t d = last; d >= 0; --d) {
    row_stride[d] = stride;
    stride *= self.size(d);
  }
  const int64_t num_rows = stride;
  // On the CPU with the leading dimensions indexed, the checks and the rows in one pass (leading_rows_cpu).
  at::Tensor leading_rows;
  if (!self.is_cuda() && adjacent && first == 0) {
    std::vector<int64_t> strides;
    for (int64_t d : positions) strides.push_back(row_stride[d]);
    leading_rows = leading_rows_cpu(defined, indexed_sizes, strides);
  } else {
    check_index_bounds(defined, indexed_sizes);
  }
  int64_t result_numel = 1;
  for (int64_t s : result_shape) result_numel *= s;
  if (result_numel == 0 || self.numel() == 0) return self;
  // Elsewhere the rows by ATen integer ops on self's device.
  at::Tensor rows = leading_rows;
  if (!rows.defined()) {
    const at::TensorOptions long_options = self.options().dtype(at::kLong);
    at::Tensor adv = at::zeros_like(defined[0], long_options);
    at::Tensor valid;
    for (size_t i = 0; i < defined.size(); ++i) {
      const at::Tensor& v = defined[i];
      const int64_t size = indexed_sizes[i];
      adv = adv + at::where(v < 0, v + size, v) * row_stride[positions[i]];
      if (!validates_on_host(v)) {
        const at::Tensor ok = (v >= -size).logical_and_(v < size);
        valid = valid.defined() ? valid.logical_and_(ok) : ok;
      }
    }
    if (valid.defined()) {
      // NB: an index out of range gets the row num_rows, which the engine rejects (a device-side assert),
      // rather than wrapping into a neighbouring row.
      adv = at::where(valid, adv, num_rows);
    }
    const int64_t row_ndim = static_cast<int64_t>(row_shape.size());
    const int64_t index_ndim = static_cast<int64_t>(index_shape.size());
    std::vector<int64_t> view(row_ndim, 1);
    for (int64_t a = 0; a < index_ndim; ++a) view[index_axis + a] = index_shape[a];
    rows = adv.reshape(view);
    // Each sliced dimension of self adds arange(size) * row stride along its axis of the result.
    std::vector<int64_t> axes;
    if (adjacent) {
      for (int64_t d = 0; d < first; ++d) axes.push_back(d);
    } else {
      for (size_t j = 0; j < slice_dims.size(); ++j) axes.push_back(index_ndim + static_cast<int64_t>(j));
    }
    const std::vector<int64_t>& sliced = adjacent ? axes : slice_dims;
    for (size_t j = 0; j < axes.size(); ++j) {
      const int64_t d = sliced[j];
      std::vector<int64_t> shape(row_ndim, 1);
      shape[axes[j]] = self.size(d);
      rows = rows + (at::arange(self.size(d), long_options) * row_stride[d]).view(shape);
    }
    rows = rows.expand(row_shape).contiguous();
  }
  const at::Tensor flat_values = value.expand(result_shape).contiguous();
  at::Tensor work = self.is_contiguous() ? self : self.contiguous();
  if (work.is_cuda()) {
    cuda::index_put_kernel(work, rows, flat_values, inner, accumulate);
  } else {
    index_put_compute<cpu::Engine>(work, rows, flat_values, inner, accumulate);
  }
  if (!work.is_same(self)) self.copy_(work);
  return self;
}

}  // namespace detops
