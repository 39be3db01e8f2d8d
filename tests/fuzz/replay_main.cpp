// The fuzz targets without libFuzzer: replays every file under the directories (or files) given,
// in name order, through LLVMFuzzerTestOneInput. CTest runs it over the committed corpus and the
// crashers found so far (tests/fuzz/corpus/TARGET, tests/fuzz/regressions/TARGET), in every
// build, so a fixed crash stays fixed without clang. A finding aborts, as it would under
// libFuzzer; the file being replayed is printed first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::filesystem::path> inputs(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path root = argv[i];
    if (std::filesystem::is_directory(root)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
        if (entry.is_regular_file()) files.push_back(entry.path());
    } else {
      files.push_back(root);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  const auto files = inputs(argc, argv);
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs under the paths given\n");
    return 1;
  }
  for (const auto& path : files) {
    std::fprintf(stderr, "replay: %s\n", path.c_str());
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 1;
    }
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no finding\n", files.size());
  return 0;
}
