#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "stratsim/core/mesh.hpp"

using namespace stratsim::core;

// Reference vector 18 and the DeviceMesh examples of pytorch-semantics.md §8.
TEST(DeviceMesh, RowMajorCoordinatesAndGroups) {
  DeviceMesh mesh({4, 2}, {"dp", "tp"});
  EXPECT_EQ(mesh.coordinate(5), (std::vector<int>{2, 1}));
  EXPECT_EQ(mesh.group_ranks(5, {1}), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.group_ranks(5, {0}), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(mesh.all_groups({1}), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh.all_groups({0}), (std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(DeviceMesh, TwoByFourAndTwoByTwo) {
  DeviceMesh a({2, 4}, {"dp", "tp"});
  EXPECT_EQ(a.all_groups({1}), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(a.all_groups({0}), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  DeviceMesh b({2, 2}, {"dp", "tp"});
  EXPECT_EQ(b.all_groups({1}), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(b.all_groups({0}), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(b.group_ranks(3, {0, 1}), (std::vector<int>{0, 1, 2, 3}));
}

// Property: along any dims, the groups partition the world and every rank finds itself in its group.
TEST(DeviceMesh, GroupsPartitionTheWorld) {
  for (std::vector<int> shape : {std::vector<int>{8}, {2, 3}, {4, 2, 2}, {3, 1, 5}}) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < shape.size(); ++i) names.push_back("d" + std::to_string(i));
    DeviceMesh mesh(shape, names);
    for (int d = 0; d < mesh.ndim(); ++d) {
      std::vector<int> seen(mesh.world_size(), 0);
      for (const auto& group : mesh.all_groups({d})) {
        EXPECT_EQ(static_cast<int>(group.size()), shape[d]);
        for (int r : group) ++seen[r];
      }
      for (int r = 0; r < mesh.world_size(); ++r) {
        EXPECT_EQ(seen[r], 1);
        auto group = mesh.group_ranks(r, {d});
        EXPECT_NE(std::find(group.begin(), group.end(), r), group.end());
        EXPECT_EQ(mesh.rank_at(mesh.coordinate(r)), r);
      }
    }
  }
}

// group_index numbers a rank's group row-major over the other dims, which is the position of that
// group in all_groups (the order PyTorch creates them). 3-D meshes tell row-major from a plain sum
// of coordinates: on [2, 2, 2] along dim 2, rank 4 (coordinate 1, 0, 0) is in the third group,
// index 2; summing the other coordinates gives 1, rank 2's group.
TEST(DeviceMesh, GroupIndexIsThePositionInAllGroups) {
  DeviceMesh cube({2, 2, 2}, {"a", "b", "c"});
  EXPECT_EQ(cube.group_index(4, {2}), 2);
  EXPECT_EQ(cube.group_index(2, {2}), 1);
  EXPECT_EQ(cube.group_index(6, {0}), 2);  // groups {0, 4}, {1, 5}, {2, 6}, {3, 7}
  for (std::vector<int> shape : {std::vector<int>{8}, {2, 3}, {4, 2, 2}, {3, 1, 5}, {2, 3, 4}}) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < shape.size(); ++i) names.push_back("d" + std::to_string(i));
    DeviceMesh mesh(shape, names);
    for (int d = 0; d < mesh.ndim(); ++d) {
      const auto groups = mesh.all_groups({d});
      for (int r = 0; r < mesh.world_size(); ++r) {
        const int index = mesh.group_index(r, {d});
        ASSERT_GE(index, 0);
        ASSERT_LT(index, static_cast<int>(groups.size()));
        const auto& group = groups[index];
        EXPECT_NE(std::find(group.begin(), group.end(), r), group.end())
            << "rank " << r << " along dim " << d << " of a " << shape.size() << "-d mesh";
      }
    }
  }
}

// position_in_group and member_of_group agree with the listed group on every rank and dim set.
TEST(DeviceMesh, PositionsInAGroupWithoutListingIt) {
  const DeviceMesh mesh({2, 3, 4}, {"a", "b", "c"});
  for (const std::vector<int>& dims :
       std::vector<std::vector<int>>{{0}, {1}, {2}, {0, 2}, {2, 0}, {1, 2}, {0, 1, 2}, {}}) {
    for (int rank = 0; rank < mesh.world_size(); ++rank) {
      const std::vector<int> members = mesh.group_ranks(rank, dims);
      const auto at = std::find(members.begin(), members.end(), rank) - members.begin();
      EXPECT_EQ(mesh.position_in_group(rank, dims), at) << "rank " << rank;
      for (int p = 0; p < static_cast<int>(members.size()); ++p)
        EXPECT_EQ(mesh.member_of_group(rank, dims, p), members[p]) << "rank " << rank << " position " << p;
    }
  }
}
