// read_document: any stratsim document by its "format". Large timelines are the case that matters
// (a million ops is tens of megabytes), so the file is read in one piece and parsed through an
// iterator that counts the bytes it has handed the parser: that gives progress and a cancel point
// without a second pass or a parser callback on every value.
#include "stratsim/core/document.hpp"

#include <filesystem>

#include <fmt/format.h>

#include <iterator>
#include <nlohmann/json.hpp>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

// Parsing is most of the work; building the program and the run from the parsed tree is the rest.
constexpr double kParseShare = 0.8;
constexpr std::size_t kProgressStride = 1 << 20;  // bytes between progress calls

// Polls `progress` every kProgressStride bytes the parser consumes.
class ProgressPoint {
 public:
  ProgressPoint(const ReadProgress& progress, std::size_t total) : progress_(progress), total_(total) {}
  void reached(std::size_t offset) {
    if (offset < next_) return;
    next_ = offset + kProgressStride;
    report(kParseShare * static_cast<double>(offset) / static_cast<double>(std::max<std::size_t>(1, total_)));
  }
  void report(double fraction) {
    if (progress_ && !progress_(fraction)) throw ReadCancelled("reading cancelled");
  }

 private:
  const ReadProgress& progress_;
  std::size_t total_;
  std::size_t next_ = kProgressStride;
};

// A forward iterator over the text that tells the progress point where the parser is.
struct CountingIterator {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* base = nullptr;
  const char* at = nullptr;
  ProgressPoint* point = nullptr;

  reference operator*() const { return *at; }
  CountingIterator& operator++() {
    ++at;
    if (((at - base) & (kProgressStride - 1)) == 0) point->reached(static_cast<std::size_t>(at - base));
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  friend bool operator==(const CountingIterator& a, const CountingIterator& b) { return a.at == b.at; }
};

json parse_json(const std::string& text, const std::string& origin, ProgressPoint& point) {
  check_document_limits(text, origin);
  try {
    const CountingIterator begin{text.data(), text.data(), &point}, end{text.data(), text.data() + text.size(), &point};
    return json::parse(begin, end);
  } catch (const json::exception&) {
    // Reparse without the counting iterator for the CLI's own message (line and column).
    return parse_document(text, origin, /*yaml=*/false);
  }
}

}  // namespace

Document document_from_json(json document, const std::string& origin) {
  if (is_profiler_trace(document)) {
    Document out;
    out.origin = origin;
    out.kind = DocumentKind::profiler_trace;
    std::vector<RankTrace> ranks;
    ranks.push_back(rank_trace_from_json(document, origin));
    out.trace = assemble_profiler_trace(std::move(ranks));
    return out;
  }
  const JsonReader doc(document, origin);
  doc.expect_object();
  const std::string format = doc.at("format").as_string();
  Document out;
  out.origin = origin;
  if (format == "stratsim.timeline") {
    out.kind = DocumentKind::timeline;
    out.timeline = timeline_from_json(document, origin);
  } else if (format == "stratsim.simulation") {
    out.kind = DocumentKind::run_report;
    out.report = run_report_from_json(std::move(document), origin);
  } else if (format == "stratsim.program") {
    out.kind = DocumentKind::program;
    out.program = program_from_json(document, origin);
  } else {
    doc.at("format").fail(fmt::format(
        "expected stratsim.timeline, stratsim.simulation or stratsim.program (or a profiler trace), got \"{}\"",
        format));
  }
  return out;
}

Document read_document(const std::string& path, const ReadProgress& progress) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    Document folder;
    folder.origin = path;
    folder.kind = DocumentKind::profiler_trace;
    folder.trace = read_profiler_trace({path});
    return folder;
  }
  const std::string text = read_maybe_gzipped_file(path);
  ProgressPoint point(progress, text.size());
  point.report(0);
  json parsed = parse_json(text, path, point);
  point.report(kParseShare);
  Document document = document_from_json(std::move(parsed), path);
  point.report(1);
  return document;
}

}  // namespace stratsim::core
