// Output files, written whole or not at all, and never at the cost of a file the user did not ask
// us to write.
//
// Rules (README "Outputs"):
//  - A regular file (new or existing) is staged as a temporary beside it and renamed over it only
//    once every output of the command has been staged, so a failure (a full disk, a quota, a
//    second output that cannot be written) leaves every existing file as it was and no temporary.
//  - A symbolic link is written through: the file it points at is replaced, the link stays.
//  - A device, FIFO or socket (-o /dev/null, a pipe) is written in place: renaming a file over it
//    would replace the device itself. So is a descriptor's file (-o /dev/stdout > out.txt, or
//    >> log.txt), appended to where the shell left it.
//  - An existing file keeps its permission bits.
//
//   cli::check_writable({"report.json", "trace.json"});  // before the work
//   ...
//   cli::write_all_or_nothing({{"report.json", report}, {"trace.json", trace}});
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace stratsim::cli {

// Refuses, before any work, an output whose directory does not exist or cannot be written, or
// that is a directory (a run of many minutes would otherwise fail only at its end). Empty paths
// are skipped. Throws core::InputError.
void check_writable(const std::vector<std::string>& paths);

// Writes every (path, text) or, on failure, none of the regular files; throws core::InputError
// ("PATH: cannot write file (REASON)").
void write_all_or_nothing(const std::vector<std::pair<std::string, std::string>>& files);
// The same for one file.
void write_atomically(const std::string& path, const std::string& text);
// A command's one report: to `path` as write_atomically does, or to standard output when empty.
void write_or_print(const std::string& path, const std::string& text);

}  // namespace stratsim::cli
