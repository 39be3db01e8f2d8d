#include "stratsim/core/mesh.hpp"

#include <algorithm>
#include <stdexcept>

namespace stratsim::core {

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> dim_names)
    : shape_(std::move(shape)), dim_names_(std::move(dim_names)) {
  if (shape_.empty()) throw std::invalid_argument("mesh shape must not be empty");
  if (dim_names_.size() != shape_.size()) throw std::invalid_argument("one name per mesh dimension");
  strides_.assign(shape_.size(), 1);
  for (int d = ndim() - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * shape_[d + 1];
  world_size_ = strides_[0] * shape_[0];
}

int DeviceMesh::dim_index(const std::string& name) const {
  auto it = std::find(dim_names_.begin(), dim_names_.end(), name);
  return it == dim_names_.end() ? -1 : static_cast<int>(it - dim_names_.begin());
}

std::vector<int> DeviceMesh::coordinate(int rank) const {
  std::vector<int> coord(shape_.size());
  for (int d = 0; d < ndim(); ++d) coord[d] = (rank / strides_[d]) % shape_[d];
  return coord;
}

int DeviceMesh::rank_at(const std::vector<int>& coordinate) const {
  int rank = 0;
  for (int d = 0; d < ndim(); ++d) rank += coordinate[d] * strides_[d];
  return rank;
}

int DeviceMesh::group_size(const std::vector<int>& dims) const {
  int size = 1;
  for (int d : dims) size *= shape_[d];
  return size;
}

std::vector<int> DeviceMesh::group_ranks(int rank, const std::vector<int>& dims) const {
  std::vector<int> base = coordinate(rank);
  for (int d : dims) base[d] = 0;
  const int base_rank = rank_at(base);
  // A flattened sub-mesh lists its ranks row-major over its dims, in mesh order, last fastest;
  // for one dim this is the row mesh.swapdims(-1, d).reshape(-1, n) gives that rank.
  std::vector<int> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> counter(sorted.size(), 0);
  std::vector<int> ranks;
  int total = group_size(sorted);
  ranks.reserve(total);
  for (int i = 0; i < total; ++i) {
    int r = base_rank;
    for (std::size_t k = 0; k < sorted.size(); ++k) r += counter[k] * strides_[sorted[k]];
    ranks.push_back(r);
    for (int k = static_cast<int>(sorted.size()) - 1; k >= 0; --k) {
      if (++counter[k] < shape_[sorted[k]]) break;
      counter[k] = 0;
    }
  }
  return ranks;
}

int DeviceMesh::group_index(int rank, const std::vector<int>& dims) const {
  // Groups are created row by row over the remaining dims in row-major order.
  std::vector<int> coord = coordinate(rank);
  int index = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    index = index * shape_[d] + coord[d];
  }
  return index;
}

int DeviceMesh::position_in_group(int rank, const std::vector<int>& dims) const {
  std::vector<int> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  const std::vector<int> coord = coordinate(rank);
  int position = 0;
  for (int d : sorted) position = position * shape_[d] + coord[d];
  return position;
}

int DeviceMesh::member_of_group(int rank, const std::vector<int>& dims, int position) const {
  std::vector<int> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> coord = coordinate(rank);
  for (auto d = sorted.rbegin(); d != sorted.rend(); ++d) {
    coord[*d] = position % shape_[*d];
    position /= shape_[*d];
  }
  return rank_at(coord);
}

std::vector<std::vector<int>> DeviceMesh::all_groups(const std::vector<int>& dims) const {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(world_size_, false);
  for (int rank = 0; rank < world_size_; ++rank) {
    if (seen[rank]) continue;
    groups.push_back(group_ranks(rank, dims));
    for (int member : groups.back()) seen[member] = true;
  }
  return groups;
}

std::string DeviceMesh::describe_dims(const std::vector<int>& dims) const {
  if (dims.empty()) return "self";
  if (static_cast<int>(dims.size()) == ndim() && ndim() > 1) {
    bool all = true;
    for (int d = 0; d < ndim(); ++d) all = all && dims[d] == d;
    if (all) return "world";
  }
  std::string out;
  for (int d : dims) out += (out.empty() ? "" : "+") + dim_names_[d];
  return out;
}

}  // namespace stratsim::core
