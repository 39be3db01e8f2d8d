#include "stratsim/core/program.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stratsim/core/enum_names.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::core {

namespace {

constexpr EnumNames<Phase, 5> kPhaseNames{{{{Phase::init, "init"},
                                            {Phase::forward, "forward"},
                                            {Phase::backward, "backward"},
                                            {Phase::recompute, "recompute"},
                                            {Phase::optimizer, "optimizer"}}}};

constexpr EnumNames<CollectiveKind, 6> kCollectiveKindNames{{{{CollectiveKind::all_reduce, "all_reduce"},
                                                              {CollectiveKind::all_gather, "all_gather"},
                                                              {CollectiveKind::reduce_scatter, "reduce_scatter"},
                                                              {CollectiveKind::broadcast, "broadcast"},
                                                              {CollectiveKind::all_to_all, "all_to_all"},
                                                              {CollectiveKind::scatter, "scatter"}}}};

constexpr EnumNames<OpRole, 24> kRoleNames{{{{OpRole::none, "none"},
                                             {OpRole::leaf, "leaf"},
                                             {OpRole::param_matmul, "param_matmul"},
                                             {OpRole::optimizer, "optimizer"},
                                             {OpRole::ddp_param_count, "ddp_param_count"},
                                             {OpRole::ddp_param_shapes, "ddp_param_shapes"},
                                             {OpRole::ddp_module_states, "ddp_module_states"},
                                             {OpRole::ddp_bucket_indices, "ddp_bucket_indices"},
                                             {OpRole::ddp_bucket_sizes, "ddp_bucket_sizes"},
                                             {OpRole::ddp_used_map, "ddp_used_map"},
                                             {OpRole::ddp_bucket, "ddp_bucket"},
                                             {OpRole::fsdp_module_states, "fsdp_module_states"},
                                             {OpRole::fsdp_unshard, "fsdp_unshard"},
                                             {OpRole::fsdp_reduce_grad, "fsdp_reduce_grad"},
                                             {OpRole::fsdp_replicate_grad, "fsdp_replicate_grad"},
                                             {OpRole::fsdp2_copy, "fsdp2_copy"},
                                             {OpRole::tp_input, "tp_input"},
                                             {OpRole::tp_output, "tp_output"},
                                             {OpRole::tp_grad_input, "tp_grad_input"},
                                             {OpRole::tp_grad_output, "tp_grad_output"},
                                             {OpRole::tp_param_grad, "tp_param_grad"},
                                             {OpRole::tp_distribute, "tp_distribute"},
                                             {OpRole::clip_grad_norm, "clip_grad_norm"},
                                             {OpRole::grad_scaler, "grad_scaler"}}}};

// A JSON string naming a value of `names`' enum; anything else is an error at the node's path.
template <typename Enum, std::size_t N>
Enum parse_enum(const JsonReader& node, const EnumNames<Enum, N>& names) {
  const std::string text = node.as_string();
  if (auto value = names.parse(text)) return *value;
  node.fail(fmt::format("unknown value \"{}\" (expected {})", text, names.expected()));
}

}  // namespace

std::string_view phase_name(Phase phase) { return kPhaseNames.name(phase); }
std::string_view collective_kind_name(CollectiveKind kind) { return kCollectiveKindNames.name(kind); }
std::optional<CollectiveKind> find_collective_kind(std::string_view name) { return kCollectiveKindNames.parse(name); }
bool runs_in_place(CollectiveKind kind) {
  return kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast;
}
std::string_view op_role_name(OpRole role) { return kRoleNames.name(role); }

Phase parse_phase(const JsonReader& node) { return parse_enum(node, kPhaseNames); }
CollectiveKind parse_collective_kind(const JsonReader& node) { return parse_enum(node, kCollectiveKindNames); }

int Program::stream_id(const std::string& name) {
  for (std::size_t i = 0; i < streams.size(); ++i)
    if (streams[i] == name) return static_cast<int>(i);
  streams.push_back(name);
  return static_cast<int>(streams.size()) - 1;
}

int Program::group_id(const std::vector<int>& mesh_dims, int block_size) {
  const int full = mesh.group_size(mesh_dims);
  if (block_size == full) block_size = 0;  // one run: the whole group
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (groups[i].mesh_dims == mesh_dims && groups[i].block_size == block_size) return static_cast<int>(i);
  std::string name = mesh.describe_dims(mesh_dims);
  if (block_size > 0) name += fmt::format("({})", block_size);
  groups.push_back({mesh_dims, std::move(name), block_size > 0 ? block_size : full, block_size});
  return static_cast<int>(groups.size()) - 1;
}

std::vector<int> Program::group_ranks(int group, int rank) const {
  const ProgramGroup& g = groups[group];
  if (g.block_size == 0) return mesh.group_ranks(rank, g.mesh_dims);
  const int first = mesh.position_in_group(rank, g.mesh_dims) / g.block_size * g.block_size;
  std::vector<int> members;
  for (int position = first; position < first + g.block_size; ++position)
    members.push_back(mesh.member_of_group(rank, g.mesh_dims, position));
  return members;
}

int Program::group_index(int group, int rank) const {
  const ProgramGroup& g = groups[group];
  const int index = mesh.group_index(rank, g.mesh_dims);
  if (g.block_size == 0) return index;
  const int runs = mesh.group_size(g.mesh_dims) / g.block_size;
  return index * runs + mesh.position_in_group(rank, g.mesh_dims) / g.block_size;
}

std::vector<std::vector<int>> Program::all_groups(int group) const {
  const ProgramGroup& g = groups[group];
  std::vector<std::vector<int>> full = mesh.all_groups(g.mesh_dims);
  if (g.block_size == 0) return full;
  std::vector<std::vector<int>> runs;
  for (const std::vector<int>& members : full)
    for (std::size_t begin = 0; begin < members.size(); begin += g.block_size)
      runs.emplace_back(members.begin() + static_cast<std::ptrdiff_t>(begin),
                        members.begin() + static_cast<std::ptrdiff_t>(begin + g.block_size));
  return runs;
}

ProgramOp& Program::add(ProgramOp op) {
  op.id = static_cast<int>(ops.size());
  ops.push_back(std::move(op));
  return ops.back();
}

nlohmann::json program_to_json(const Program& program) {
  using json = nlohmann::json;
  json doc;
  doc["format"] = "stratsim.program";
  doc["version"] = 1;
  doc["world_size"] = program.world_size;
  doc["mesh"] = {{"shape", program.mesh.shape()}, {"dim_names", program.mesh.dim_names()}};
  doc["iterations"] = program.iterations;
  doc["streams"] = program.streams;
  json groups = json::array();
  for (const ProgramGroup& group : program.groups) {
    json dims = json::array();
    for (int d : group.mesh_dims) dims.push_back(program.mesh.dim_names()[d]);
    json entry = {{"name", group.name}, {"mesh_dims", dims}, {"size", group.size}};
    if (group.block_size > 0) entry["block_size"] = group.block_size;
    groups.push_back(std::move(entry));
  }
  doc["groups"] = groups;
  json ops = json::array();
  for (const ProgramOp& op : program.ops) {
    json o = {{"id", op.id},         {"iteration", op.iteration},     {"name", op.name},
              {"module", op.module}, {"phase", phase_name(op.phase)}, {"stream", op.stream},
              {"deps", op.deps}};
    if (op.role != OpRole::none) o["role"] = op_role_name(op.role);
    if (op.type == OpType::compute) {
      o["type"] = "compute";
      o["op_class"] = op.op_class;
      o["flops"] = op.flops;
      o["bytes"] = op.bytes_accessed;
      o["dtype"] = dtype_name(op.dtype);
      if (!op.gemms.empty()) {
        json gemms = json::array();
        for (const GemmShape& g : op.gemms) gemms.push_back({g.m, g.n, g.k});
        o["gemms"] = gemms;
      }
      if (!op.params.empty()) o["params"] = op.params;
    } else {
      o["type"] = "collective";
      o["kind"] = collective_kind_name(op.kind);
      o["op"] = op.comm_key;
      o["group"] = op.group;
      o["bytes"] = op.bytes;
      o["input_bytes"] = op.input_bytes;
      o["output_bytes"] = op.output_bytes;
      o["dtype"] = dtype_name(op.dtype);
      o["reason"] = op.reason;
      o["params"] = op.params;
      if (op.role >= OpRole::tp_input && op.role <= OpRole::tp_grad_output) {
        o["from"] = op.from.str();
        o["to"] = op.to.str();
      }
    }
    ops.push_back(std::move(o));
  }
  doc["ops"] = std::move(ops);
  return doc;
}

namespace {

constexpr std::int64_t kMaxWorldSize = 1 << 24;

// The mesh checked before DeviceMesh sees it: its constructor's own checks are for programmers.
DeviceMesh read_mesh(const JsonReader& mesh, int world_size) {
  const JsonReader shape_node = mesh.at("shape");
  shape_node.expect_array();
  if (shape_node.size() == 0) shape_node.fail("expected at least one dimension");
  std::vector<int> shape;
  std::int64_t product = 1;
  for (std::size_t i = 0; i < shape_node.size(); ++i) {
    const std::int64_t size = shape_node.at(i).as_int();
    if (size < 1 || size > kMaxWorldSize) shape_node.at(i).fail("expected a dimension size from 1 to 16777216");
    product *= size;
    if (product > kMaxWorldSize) shape_node.fail("the mesh has more than 16777216 ranks");
    shape.push_back(static_cast<int>(size));
  }
  if (product != world_size)
    shape_node.fail(fmt::format("the mesh has {} ranks but world_size is {}", product, world_size));
  std::vector<std::string> names = mesh.get_string_list("dim_names");
  if (names.size() != shape.size())
    mesh.at("dim_names").fail(fmt::format("expected one name per mesh dimension ({})", shape.size()));
  return DeviceMesh(std::move(shape), std::move(names));
}

// [[m, n, k], ...], each a positive size; bounded so m*n*k stays far inside a double's exact range.
std::vector<GemmShape> read_gemms(const JsonReader& node) {
  node.expect_array();
  std::vector<GemmShape> gemms;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const JsonReader shape = node.at(i);
    shape.expect_array();
    if (shape.size() != 3) shape.fail("expected [m, n, k]");
    std::int64_t dims[3];
    for (std::size_t d = 0; d < 3; ++d) {
      dims[d] = shape.at(d).as_int();
      if (dims[d] < 1 || dims[d] > (std::int64_t{1} << 40)) shape.at(d).fail("expected a size from 1 to 2^40");
    }
    gemms.push_back({dims[0], dims[1], dims[2]});
  }
  return gemms;
}

}  // namespace

Program program_from_json(const nlohmann::json& document, const std::string& origin) {
  return program_from_json(JsonReader(document, origin));
}

Program program_from_json(const JsonReader& doc) {
  doc.allow_only({"format", "version", "world_size", "mesh", "iterations", "streams", "groups", "ops"});
  if (doc.get_string("format", "") != "stratsim.program")
    doc.fail("not a stratsim program (format must be \"stratsim.program\")");
  if (doc.at("version").as_int() != 1) doc.at("version").fail("unsupported program version (expected 1)");
  Program program;
  const std::int64_t world_size = doc.at("world_size").as_int();
  if (world_size < 1 || world_size > kMaxWorldSize) doc.at("world_size").fail("expected 1 to 16777216 ranks");
  program.world_size = static_cast<int>(world_size);
  program.mesh = read_mesh(doc.at("mesh"), program.world_size);
  program.iterations = static_cast<int>(doc.get_int("iterations", 1));
  program.streams = doc.get_string_list("streams");
  JsonReader groups = doc.at("groups");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const JsonReader group = groups.at(i);
    group.allow_only({"name", "mesh_dims", "size", "block_size"});
    std::vector<int> dims;
    for (const std::string& name : group.get_string_list("mesh_dims")) {
      int d = program.mesh.dim_index(name);
      if (d < 0) group.fail(fmt::format("unknown mesh dimension \"{}\"", name));
      if (std::find(dims.begin(), dims.end(), d) != dims.end())
        group.fail(fmt::format("mesh dimension \"{}\" named twice", name));
      dims.push_back(d);
    }
    const int full = program.mesh.group_size(dims);
    const std::int64_t block = group.get_int("block_size", 0);
    if (block < 0 || block > full || (block > 0 && full % block != 0))
      group.at("block_size").fail(fmt::format("expected a divisor of the group's {} members", full));
    if (program.group_id(dims, static_cast<int>(block)) != static_cast<int>(i))
      group.fail("the same group as an earlier one");
  }
  JsonReader ops = doc.at("ops");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    JsonReader o = ops.at(i);
    ProgramOp op;
    op.iteration = static_cast<int>(o.at("iteration").as_int());
    op.name = o.at("name").as_string();
    op.module = o.get_string("module", "");
    op.phase = parse_enum(o.at("phase"), kPhaseNames);
    op.stream = static_cast<int>(o.at("stream").as_int());
    if (op.stream < 0 || op.stream >= static_cast<int>(program.streams.size())) o.at("stream").fail("no such stream");
    for (std::size_t k = 0; k < o.at("deps").size(); ++k) {
      int dep = static_cast<int>(o.at("deps").at(k).as_int());
      if (dep < 0 || dep >= static_cast<int>(i)) o.at("deps").at(k).fail("a dependency must name an earlier op");
      op.deps.push_back(dep);
    }
    if (o.has("role")) op.role = parse_enum(o.at("role"), kRoleNames);
    for (auto [key, placement] : {std::pair{"from", &op.from}, std::pair{"to", &op.to}}) {
      if (!o.has(key)) continue;
      auto parsed = parse_placement(o.at(key).as_string());
      if (!parsed) o.at(key).fail("expected Shard(d), Replicate() or Partial()");
      *placement = *parsed;
    }
    const std::string type = o.at("type").as_string();
    if (type == "compute") {
      op.type = OpType::compute;
      op.op_class = o.get_string("op_class", "");
      op.flops = o.get_number("flops", 0);
      op.bytes_accessed = o.get_int("bytes", 0);
      auto dtype = parse_dtype(o.get_string("dtype", "float32"));
      if (!dtype) o.at("dtype").fail("unknown dtype");
      op.dtype = *dtype;
      op.params = o.get_string_list("params");
      if (o.has("gemms")) op.gemms = read_gemms(o.at("gemms"));
    } else if (type == "collective") {
      op.type = OpType::collective;
      op.kind = parse_enum(o.at("kind"), kCollectiveKindNames);
      op.comm_key = o.get_string("op", "");
      op.group = static_cast<int>(o.at("group").as_int());
      if (op.group < 0 || op.group >= static_cast<int>(program.groups.size())) o.at("group").fail("no such group");
      op.bytes = o.at("bytes").as_int();
      op.input_bytes = o.get_int("input_bytes", op.bytes);
      op.output_bytes = o.get_int("output_bytes", op.bytes);
      auto dtype = parse_dtype(o.get_string("dtype", "float32"));
      if (!dtype) o.at("dtype").fail("unknown dtype");
      op.dtype = *dtype;
      op.reason = o.get_string("reason", "");
      op.params = o.get_string_list("params");
    } else {
      o.at("type").fail("expected \"compute\" or \"collective\"");
    }
    program.add(std::move(op));
  }
  return program;
}

}  // namespace stratsim::core
