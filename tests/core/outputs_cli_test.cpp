// Output files as a user meets them (core/cli/include/stratsim/cli/output_files.hpp): a symbolic
// link is written through, a failed write (a full disk, simulated by a file-size limit) leaves every
// existing file as it was and no temporary, and permissions of a replaced file are kept.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cli_support.hpp"

namespace {

namespace fs = std::filesystem;
using stratsim::test::CliRun;
using stratsim::test::read_file;
using stratsim::test::run_cli;
using stratsim::test::run_shell;

// A fresh directory per test, removed afterwards.
class OutputFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("stratsim-outputs-" + std::to_string(::getpid()) + "-" +
                                           testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> all;
    for (const auto& entry : fs::directory_iterator(dir_)) all.push_back(entry.path().filename().string());
    std::sort(all.begin(), all.end());
    return all;
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  // stratsim ARGS with writes past `kilobytes` failing as on a full disk (EFBIG; SIGXFSZ ignored
  // so the write fails instead of killing the process).
  static CliRun run_with_file_limit(int kilobytes, const std::string& args) {
    return run_shell("bash -c 'trap \"\" XFSZ; ulimit -f " + std::to_string(kilobytes) + "; exec " + STRATSIM_BINARY +
                     " " + args + "' 2>&1");
  }

  fs::path dir_;
};

int occurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST_F(OutputFiles, ASymbolicLinkIsWrittenThroughAndStaysALink) {
  write(at("report.txt"), "old\n");
  fs::create_symlink("report.txt", at("link.txt"));
  CliRun r = run_cli("plan -o " + at("link.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("link.txt"))));
  EXPECT_NE(read_file(at("report.txt")).find("stratsim plan"), std::string::npos);
  EXPECT_EQ(names(), (std::vector<std::string>{"link.txt", "report.txt"}));
}

TEST_F(OutputFiles, ADanglingLinkCreatesTheFileItNames) {
  fs::create_symlink("made.txt", at("link.txt"));
  CliRun r = run_cli("plan -o " + at("link.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("link.txt"))));
  EXPECT_NE(read_file(at("made.txt")).find("stratsim plan"), std::string::npos);
}

TEST_F(OutputFiles, AReplacedFileKeepsItsPermissions) {
  write(at("report.txt"), "old\n");
  fs::permissions(at("report.txt"), fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_EQ(run_cli("plan -o " + at("report.txt")).code, 0);
  EXPECT_EQ(fs::status(at("report.txt")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

// The report fits in the limit, the trace does not: neither existing file changes, and no
// temporary is left beside them.
TEST_F(OutputFiles, AFailedWriteLeavesExistingFilesAndNoTemporary) {
  write(at("trace.json"), "old trace\n");
  write(at("report.txt"), "old report\n");
  CliRun r = run_with_file_limit(8, "simulate --quiet --trace " + at("trace.json") + " -o " + at("report.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  // One error line (a sanitizer build adds its own warnings about SimGrid's stacks on stderr).
  EXPECT_EQ(occurrences(r.out, "stratsim: error:"), 1) << r.out;
  EXPECT_NE(r.out.find("trace.json: cannot write file (File too large)"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(at("trace.json")), "old trace\n");
  EXPECT_EQ(read_file(at("report.txt")), "old report\n");
  EXPECT_EQ(names(), (std::vector<std::string>{"report.txt", "trace.json"}));
}

// plan writes its program and its report together: a report that cannot be written leaves no
// program (and keeps the old one).
TEST_F(OutputFiles, PlanWritesItsProgramAndReportTogether) {
  write(at("program.json"), "old program\n");
  CliRun r = run_cli("plan --emit-program " + at("program.json") + " -o /dev/full");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/full: cannot write file (No space left on device)"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(at("program.json")), "old program\n");
  EXPECT_EQ(names(), (std::vector<std::string>{"program.json"}));
}

// /dev/stdout is /proc/self/fd/1, a link the kernel resolves to whatever the shell opened: a
// pipe, a file it truncated, a file it appends to. Each gets the report; none is replaced.
TEST_F(OutputFiles, DevStdoutWritesWhereTheShellPointsIt) {
  const std::string plan = std::string(STRATSIM_BINARY) + " plan --json -o /dev/stdout";
  CliRun piped = run_shell(plan + " | cat");
  EXPECT_EQ(piped.code, 0);
  EXPECT_NE(piped.out.find("\"counts\""), std::string::npos) << piped.out.substr(0, 300);
  ASSERT_EQ(run_shell(plan + " > " + at("out.json")).code, 0);
  EXPECT_NE(read_file(at("out.json")).find("\"counts\""), std::string::npos);
  write(at("log.txt"), "first line\n");
  ASSERT_EQ(run_shell(plan + " >> " + at("log.txt")).code, 0);
  const std::string log = read_file(at("log.txt"));
  EXPECT_EQ(log.rfind("first line\n", 0), 0u) << log.substr(0, 100);
  EXPECT_NE(log.find("\"counts\""), std::string::npos);
  EXPECT_EQ(names(), (std::vector<std::string>{"log.txt", "out.json"}));
}

TEST_F(OutputFiles, AFileTheUserMayNotWriteIsNotReplaced) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write any file";
  write(at("report.txt"), "read only\n");
  fs::permissions(at("report.txt"), fs::perms::owner_read);
  CliRun r = run_cli("plan -o " + at("report.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(read_file(at("report.txt")), "read only\n");
}

}  // namespace
