// Reading nccl-tests' standard output (nccl_tests.hpp).
#include "stratsim/core/nccl_tests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::core {
namespace {

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string token; in >> token;) out.push_back(token);
  return out;
}

std::optional<double> number(const std::string& text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Where the columns are: the header's tokens after '#', a data row's tokens line up with them.
struct Columns {
  std::size_t size = 0, type = 0, out_of_place_time = 0, in_place_time = 0, count = 0;
};

std::optional<Columns> header_columns(const std::vector<std::string>& header) {
  // "#", "size", "count", "type", ..., "time", ..., "time", ...
  if (header.size() < 3 || header[0] != "#" || header[1] != "size") return std::nullopt;
  Columns columns;
  std::vector<std::size_t> times;
  for (std::size_t i = 1; i < header.size(); ++i) {
    if (header[i] == "type") columns.type = i - 1;
    if (header[i] == "time") times.push_back(i - 1);
  }
  if (columns.type == 0 || times.size() != 2) return std::nullopt;
  columns.out_of_place_time = times[0];
  columns.in_place_time = times[1];
  columns.count = header.size() - 1;
  return columns;
}

}  // namespace

NcclTestsResult read_nccl_tests(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  if (!file || !(text << file.rdbuf())) throw InputError(fmt::format("{}: cannot read the file", path));
  return parse_nccl_tests(text.str(), path);
}

NcclTestsResult parse_nccl_tests(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  // "#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 [0000:04:00] NVIDIA H100 80GB HBM3"
  // (before nccl-tests had groups: no "Group 0")
  static const std::regex rank_line(
      R"(^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*?)\s*$)");
  NcclTestsResult result;
  std::vector<int> ranks_seen;
  std::optional<Columns> columns;
  std::string line;
  for (int number_of_line = 1; std::getline(in, line); ++number_of_line) {
    const std::string where = fmt::format("{}:{}", path, number_of_line);
    std::smatch match;
    if (std::regex_match(line, match, rank_line)) {
      const std::optional<double> listed = number(match[1].str());
      if (!listed || *listed > (1 << 24))
        throw InputError(fmt::format("{}: rank {} is out of range", where, match[1].str()));
      const int rank = static_cast<int>(*listed);
      if (std::find(ranks_seen.begin(), ranks_seen.end(), rank) != ranks_seen.end())
        throw InputError(fmt::format("{}: rank {} is listed twice (one run per file)", where, rank));
      ranks_seen.push_back(rank);
      if (std::find(result.hosts.begin(), result.hosts.end(), match[2].str()) == result.hosts.end())
        result.hosts.push_back(match[2].str());
      if (result.device.empty()) result.device = match[3].str();
      continue;
    }
    const std::vector<std::string> words = tokens(line);
    if (words.empty()) continue;
    if (!columns) {
      columns = header_columns(words);
      continue;
    }
    // A data row starts with the size; anything else (NCCL INFO, "# Avg bus bandwidth") is skipped.
    const std::optional<double> size = number(words[0]);
    if (!size || words[0].find_first_not_of("0123456789") != std::string::npos) continue;
    if (words.size() < columns->count)
      throw InputError(
          fmt::format("{}: expected {} columns as the header names, got {}", where, columns->count, words.size()));
    const std::optional<double> out_of_place = number(words[columns->out_of_place_time]);
    const std::optional<double> in_place = number(words[columns->in_place_time]);
    // The cost model's bounds on a measured curve (limits.hpp): what reads here, imports.
    const auto time_in_range = [](const std::optional<double>& us) {
      return us && *us > 0 && *us <= kMaxCollectiveMicroseconds;
    };
    if (!time_in_range(out_of_place) || !time_in_range(in_place))
      throw InputError(fmt::format("{}: expected positive times in microseconds up to 1e9, got \"{}\" and \"{}\"",
                                   where, words[columns->out_of_place_time], words[columns->in_place_time]));
    if (*size > static_cast<double>(kMaxCollectiveBytes))
      throw InputError(
          fmt::format("{}: size {} is over 2^50 bytes (stratsim's limit per collective)", where, words[0]));
    if (!result.dtype.empty() && words[columns->type] != result.dtype)
      throw InputError(
          fmt::format("{}: type {} after {}: one data type per file", where, words[columns->type], result.dtype));
    result.dtype = words[columns->type];
    if (*size <= 0) continue;  // a zero-byte call moves nothing: no point of a curve
    if (!result.rows.empty() && !(*size > result.rows.back().bytes))
      throw InputError(fmt::format("{}: size {} after {}: expected increasing sizes (one run per file)", where,
                                   words[0], static_cast<std::int64_t>(result.rows.back().bytes)));
    result.rows.push_back({*size, *out_of_place, *in_place});
  }
  if (ranks_seen.empty())
    throw InputError(fmt::format(
        "{}: no \"#  Rank N Group G Pid P on HOST device D\" lines: expected nccl-tests' standard output (its rank "
        "list gives the group size and the nodes)",
        path));
  if (!columns) throw InputError(fmt::format("{}: no column header (\"#  size  count  type ... time ...\")", path));
  if (result.rows.size() < 2)
    throw InputError(fmt::format("{}: expected at least two sizes, got {}", path, result.rows.size()));
  result.ranks = static_cast<int>(ranks_seen.size());
  result.nodes = static_cast<int>(result.hosts.size());
  return result;
}

}  // namespace stratsim::core
