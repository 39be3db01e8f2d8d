// DeviceMesh as torch.distributed.device_mesh builds it: ranks laid out row-major over the shape,
// one process group per row along each dimension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stratsim::core {

class DeviceMesh {
 public:
  DeviceMesh() = default;
  DeviceMesh(std::vector<int> shape, std::vector<std::string> dim_names);

  int world_size() const { return world_size_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  int dim_index(const std::string& name) const;  // -1 when absent
  int dim_size(int dim) const { return shape_[dim]; }

  std::vector<int> coordinate(int rank) const;  // unravel_index(rank, shape)
  int rank_at(const std::vector<int>& coordinate) const;
  // The ranks of `rank`'s group over `dims` (a sub-mesh flattened row-major over those dims,
  // other coordinates fixed), in mesh order. One dim gives DeviceMesh.get_group(dim).
  std::vector<int> group_ranks(int rank, const std::vector<int>& dims) const;
  // Which of the groups over `dims` `rank` is in (row index, as new_group was called).
  int group_index(int rank, const std::vector<int>& dims) const;
  // `rank`'s position in its group over `dims` (its index in group_ranks), and the member at
  // `position` of that group; both without listing the group.
  int position_in_group(int rank, const std::vector<int>& dims) const;
  int member_of_group(int rank, const std::vector<int>& dims, int position) const;
  int group_size(const std::vector<int>& dims) const;
  // Every group over `dims`, in the order every rank creates them.
  std::vector<std::vector<int>> all_groups(const std::vector<int>& dims) const;
  std::string describe_dims(const std::vector<int>& dims) const;  // "dp", "dp+tp"

 private:
  std::vector<int> shape_;
  std::vector<std::string> dim_names_;
  std::vector<int> strides_;
  int world_size_ = 1;
};

}  // namespace stratsim::core
