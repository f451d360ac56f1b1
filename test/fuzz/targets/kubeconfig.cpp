// kubeconfig loading (YAML subset or JSON). load_kubeconfig() takes a path,
// so each input is written to a private, already unlinked temporary file.
// Properties: nothing throws or crashes; a loaded configuration passes
// validate(); an error text never contains the loaded token or key data.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <variant>

#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"
#include "kube/config.hpp"

namespace extsvc::fuzz {

namespace {

// One temporary file per process, unlinked at once (libFuzzer may end the
// process without running exit handlers) and reached as /proc/self/fd/N.
struct TempFile {
  int fd = -1;
  std::string path;
};

const TempFile& temp_file() {
  static const TempFile file = [] {
    // tmpfs when there is one: a file is written per input.
    const char* dir = std::getenv("TMPDIR");
    if (dir == nullptr || *dir == '\0') dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = std::string(dir) + "/extsvc-fuzz-kubeconfig-XXXXXX";
    TempFile f;
    f.fd = mkstemp(tmpl.data());
    FUZZ_CHECK(f.fd >= 0);
    unlink(tmpl.c_str());
    f.path = "/proc/self/fd/" + std::to_string(f.fd);
    return f;
  }();
  return file;
}

void write_file(int fd, std::string_view text) {
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

bool leaks(const std::string& error, const std::string& secret) {
  return secret.size() >= 8 && error.find(secret) != std::string::npos;
}

}  // namespace

int kubeconfig(const std::uint8_t* data, std::size_t size) {
  const TempFile& file = temp_file();
  write_file(file.fd, as_text(data, size));
  const std::string& path = file.path;
  try {
    const auto loaded = kube::load_kubeconfig(path);
    const auto* cfg = std::get_if<kube::ClusterConfig>(&loaded);
    if (cfg == nullptr) return 0;
    // load_kubeconfig() leaves the token-over-http:// decision to the
    // caller's validate() (extsvc.kube_allow_insecure_http); everything
    // else it accepts must validate.
    kube::ClusterConfig probe = *cfg;
    probe.allow_insecure_http = true;
    FUZZ_CHECK(!kube::validate(probe));
    // Asking for a context that does not exist fails without quoting secrets.
    const auto other = kube::load_kubeconfig(path, "fuzz-no-such-context");
    if (const auto* err = std::get_if<std::string>(&other)) {
      FUZZ_CHECK(!leaks(*err, cfg->token));
      FUZZ_CHECK(!leaks(*err, cfg->client_key_data));
    }
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, e.what());  // load_kubeconfig() documents no exceptions
  }
  return 0;
}

}  // namespace extsvc::fuzz
