// Output files: staged beside their targets, committed together (output_files.hpp has the rules).
#include "stratsim/cli/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void cannot_write(const std::string& path, const std::string& reason) {
  throw core::InputError(fmt::format("{}: cannot write file ({})", path, reason));
}

// The file `path` names once symbolic links are followed, link by link, so that a dangling link
// resolves to the file the write will create (fs::canonical refuses it; fs::weakly_canonical
// leaves it unresolved, and the rename would then replace the link).
fs::path follow_links(const std::string& path) {
  fs::path current = path;
  for (int hops = 0; hops < 40; ++hops) {  // the kernel's own bound (ELOOP)
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(current, error))) return current;
    const fs::path target = fs::read_symlink(current, error);
    if (error) return current;
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  cannot_write(path, "too many levels of symbolic links");
}

// 0 when every byte was written, else errno.
int write_whole(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// One output on its way: either a temporary beside a regular file (renamed over it at commit) or
// a device, FIFO or socket written in place at commit.
struct PendingOutput {
  std::string shown;      // the path as the user gave it, for errors
  fs::path target;        // after symbolic links
  std::string temporary;  // empty when written in place
  const std::string* text = nullptr;
};

class Stage {
 public:
  ~Stage() { discard(); }

  void add(const std::string& path, const std::string& text) {
    PendingOutput output{path, follow_links(path), "", &text};
    struct stat existing {};
    const bool exists = ::stat(output.target.c_str(), &existing) == 0;
    if (exists && S_ISDIR(existing.st_mode)) cannot_write(path, "it is a directory");
    // A file the user may not write is not replaced behind their back (the rename would allow it).
    if (exists && ::access(output.target.c_str(), W_OK) != 0) cannot_write(path, std::strerror(errno));
    if (exists && !S_ISREG(existing.st_mode)) {
      pending_.push_back(std::move(output));
      return;
    }
    // Named per process and per output, so concurrent runs and two outputs to one path never
    // share a temporary; on the target's file system, so the rename is atomic.
    output.temporary = fmt::format("{}.tmp.{}.{}", output.target.string(), ::getpid(), pending_.size());
    const mode_t mode = exists ? existing.st_mode & 07777 : 0666;
    const int fd = ::open(output.temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) cannot_write(path, std::strerror(errno));
    pending_.push_back(output);                                 // from here on the temporary is ours to remove
    int error = exists && ::fchmod(fd, mode) != 0 ? errno : 0;  // the umask narrowed it
    if (!error) error = write_whole(fd, text);
    if (::close(fd) != 0 && !error) error = errno;  // a full disk may surface only here (NFS)
    if (error) cannot_write(path, std::strerror(error));
  }

  // Devices first (a failure there still leaves every regular file untouched), then the renames.
  void commit() {
    for (const PendingOutput& output : pending_)
      if (output.temporary.empty()) write_in_place(output);
    for (PendingOutput& output : pending_) {
      if (output.temporary.empty()) continue;
      if (::rename(output.temporary.c_str(), output.target.c_str()) != 0)
        cannot_write(output.shown, std::strerror(errno));
      output.temporary.clear();
    }
    pending_.clear();
  }

 private:
  static void write_in_place(const PendingOutput& output) {
    const int fd = ::open(output.target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) cannot_write(output.shown, std::strerror(errno));
    int error = write_whole(fd, *output.text);
    if (::close(fd) != 0 && !error) error = errno;
    if (error) cannot_write(output.shown, std::strerror(error));
  }

  void discard() {
    for (const PendingOutput& output : pending_)
      if (!output.temporary.empty()) ::unlink(output.temporary.c_str());
    pending_.clear();
  }

  std::vector<PendingOutput> pending_;
};

}  // namespace

void check_writable(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    const fs::path target = follow_links(path);
    struct stat existing {};
    if (::stat(target.c_str(), &existing) == 0) {
      if (S_ISDIR(existing.st_mode)) cannot_write(path, "it is a directory");
      if (::access(target.c_str(), W_OK) != 0) cannot_write(path, std::strerror(errno));
      if (!S_ISREG(existing.st_mode)) continue;  // written in place: its directory does not matter
    }
    // A new or replaced regular file: its directory takes the temporary, then the rename.
    fs::path directory = target.parent_path();
    if (directory.empty()) directory = ".";
    std::error_code error;
    if (!fs::is_directory(directory, error)) cannot_write(path, "no directory " + directory.string());
    if (::access(directory.c_str(), W_OK | X_OK) != 0)
      cannot_write(path, fmt::format("directory {} is not writable", directory.string()));
  }
}

void write_all_or_nothing(const std::vector<std::pair<std::string, std::string>>& files) {
  Stage stage;
  for (const auto& [path, text] : files) stage.add(path, text);
  stage.commit();
}

void write_atomically(const std::string& path, const std::string& text) { write_all_or_nothing({{path, text}}); }

}  // namespace stratsim::cli
