// Rendezvous specs: where the ranks of one run meet.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/exec/backend.hpp"

namespace stratsim::exec {
namespace {

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw core::InputError(fmt::format("rendezvous \"{}\": {} (expected file:DIR or redis://HOST[:PORT])", spec, why));
}

Rendezvous parse_redis(const std::string& spec, std::string rest) {
  Rendezvous rendezvous;
  rendezvous.kind = Rendezvous::Kind::redis;
  if (rest.starts_with("//")) rest = rest.substr(2);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const auto colon = rest.rfind(':');
  rendezvous.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    int value = 0;
    const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (error != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535)
      bad(spec, fmt::format("port \"{}\" is not a number from 1 to 65535", port));
    rendezvous.port = value;
  }
  if (rendezvous.host.empty()) bad(spec, "no Redis host");
  return rendezvous;
}

}  // namespace

Rendezvous parse_rendezvous(const std::string& spec, const std::string& run_id) {
  Rendezvous rendezvous;
  if (spec.starts_with("file:")) {
    rendezvous.kind = Rendezvous::Kind::file;
    rendezvous.path = spec.substr(5);
    if (rendezvous.path.empty()) bad(spec, "no directory");
  } else if (spec.starts_with("redis:")) {
    rendezvous = parse_redis(spec, spec.substr(6));
  } else {
    bad(spec, "unknown kind");
  }
  if (run_id.empty() || run_id.find('/') != std::string::npos)
    throw core::InputError(fmt::format("run id \"{}\": expected a non-empty name without '/'", run_id));
  rendezvous.run_id = run_id;
  return rendezvous;
}

void check_bind_address(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(address.c_str(), nullptr, &hints, &found); error != 0)
    throw core::InputError(fmt::format("--bind {}: cannot resolve the address ({})", address, ::gai_strerror(error)));
  // Gloo listens on the first address it can bind; so must one of these (port 0: any free port).
  std::string why = "no address";
  bool bound = false;
  for (const addrinfo* at = found; at && !bound; at = at->ai_next) {
    const int fd = ::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol);
    if (fd < 0) continue;
    bound = ::bind(fd, at->ai_addr, at->ai_addrlen) == 0;
    if (!bound) why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!bound) throw core::InputError(fmt::format("--bind {}: cannot listen on this address ({})", address, why));
}

std::string describe(const Rendezvous& rendezvous) {
  if (rendezvous.kind == Rendezvous::Kind::redis)
    return fmt::format("redis://{}:{} (run {})", rendezvous.host, rendezvous.port, rendezvous.run_id);
  return fmt::format("file:{} (run {})", rendezvous.path, rendezvous.run_id);
}

}  // namespace stratsim::exec
