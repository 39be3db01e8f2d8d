// Output files: staged beside their targets, committed together (output_files.hpp has the rules).
#include "stratsim/cli/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
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
// `through_descriptor` is set when a link on the way is a process's descriptor (/proc/PID/fd/N,
// reached as /dev/stdout or /dev/fd/N): the file it shows is one a shell opened, to be written
// through the descriptor, never replaced.
fs::path follow_links(const std::string& path, bool* through_descriptor = nullptr) {
  fs::path current = path;
  for (int hops = 0; hops < 40; ++hops) {  // the kernel's own bound (ELOOP)
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(current, error))) return current;
    const fs::path folder = fs::weakly_canonical(current.parent_path(), error);
    if (through_descriptor && !error && folder.string().starts_with("/proc/")) *through_descriptor = true;
    const fs::path target = fs::read_symlink(current, error);
    if (error) return current;
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  cannot_write(path, "too many levels of symbolic links");
}

// Where an output's bytes go, decided before anything is written.
struct Destination {
  fs::path target;        // the file the temporary replaces, or the path written in place
  bool in_place = false;  // a device, FIFO or socket, or a descriptor's file
  bool exists = false;
  struct stat status {};  // of what the path names, when it exists
};

Destination destination_of(const std::string& path) {
  Destination destination;
  // What the path names as the kernel follows it: a /proc magic link (-o /dev/stdout, which is
  // /proc/self/fd/1) reads as "pipe:[N]", or names a file the shell opened, and only stat() sees
  // through it.
  destination.exists = ::stat(path.c_str(), &destination.status) == 0;
  if (destination.exists && S_ISDIR(destination.status.st_mode)) cannot_write(path, "it is a directory");
  // A file the user may not write is not replaced behind their back (the rename would allow it).
  if (destination.exists && ::access(path.c_str(), W_OK) != 0) cannot_write(path, std::strerror(errno));
  bool through_descriptor = false;
  destination.target = follow_links(path, &through_descriptor);
  struct stat target {};
  const bool same_file = destination.exists && ::stat(destination.target.c_str(), &target) == 0 &&
                         target.st_dev == destination.status.st_dev && target.st_ino == destination.status.st_ino;
  if (destination.exists && (!S_ISREG(destination.status.st_mode) || !same_file || through_descriptor)) {
    destination.in_place = true;
    destination.target = path;
  }
  return destination;
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
    const Destination destination = destination_of(path);
    PendingOutput output{path, destination.target, "", &text};
    if (destination.in_place) {
      pending_.push_back(std::move(output));
      return;
    }
    const bool exists = destination.exists;
    const struct stat& existing = destination.status;
    const mode_t mode = exists ? existing.st_mode & 07777 : 0666;
    const int fd = create_temporary(output, mode);
    pending_.push_back(output);                                 // from here on the temporary is ours to remove
    int error = exists && ::fchmod(fd, mode) != 0 ? errno : 0;  // the umask narrowed it
    if (!error) error = write_whole(fd, text);
    if (::close(fd) != 0 && !error) error = errno;  // a full disk may surface only here (NFS)
    if (error) cannot_write(path, std::strerror(error));
  }

  // Devices first (a failure there still leaves every regular file untouched), then the renames.
  // A rename within one directory fails only when the file system does (EIO, a read-only
  // remount): the outputs renamed before it then stay, the rest are discarded. Undoing them would
  // need a copy of each replaced file, which this does not keep.
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
  // Beside the target (the rename is then atomic), named per process and per output so that
  // concurrent runs and two outputs to one path never share one; a leftover of a crashed run
  // whose process id came back is stepped around.
  int create_temporary(PendingOutput& output, mode_t mode) {
    for (int attempt = 0;; ++attempt) {
      output.temporary = fmt::format("{}.tmp.{}.{}{}", output.target.string(), ::getpid(), pending_.size(),
                                     attempt == 0 ? "" : fmt::format(".{}", attempt));
      const int fd = ::open(output.temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd >= 0) return fd;
      if (errno != EEXIST || attempt == 100) cannot_write(output.shown, std::strerror(errno));
    }
  }

  // Appending: a descriptor's file (-o /dev/stdout > out.txt, or >> log.txt) continues where the
  // shell left it; a device or pipe has no end to append to.
  static void write_in_place(const PendingOutput& output) {
    const int fd = ::open(output.target.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
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
    const Destination destination = destination_of(path);
    if (destination.in_place) continue;  // its directory does not matter
    // A new or replaced regular file: its directory takes the temporary, then the rename.
    fs::path directory = destination.target.parent_path();
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

void write_or_print(const std::string& path, const std::string& text) {
  if (path.empty()) std::cout << text;
  else write_atomically(path, text);
}

}  // namespace stratsim::cli
