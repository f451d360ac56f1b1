#include "auth.h"

#include <openssl/crypto.h>

#include <fstream>
#include <sstream>

#include "util.h"

namespace dpfsim {

void TokenAuth::reload_if_changed() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    tokens_.clear();
    loaded_ = false;
    return;
  }
  if (loaded_ && st.st_mtim.tv_sec == mtime_.tv_sec && st.st_mtim.tv_nsec == mtime_.tv_nsec &&
      st.st_size == size_ && st.st_ino == ino_)
    return;
  std::ifstream in(path_);
  std::stringstream ss;
  ss << in.rdbuf();
  tokens_.clear();
  for (const auto& line : split(ss.str(), '\n')) {
    std::string t = trim(line);
    if (!t.empty()) tokens_.push_back(t);
  }
  mtime_ = st.st_mtim;
  size_ = st.st_size;
  ino_ = st.st_ino;
  loaded_ = true;
}

bool TokenAuth::check(const std::string& authorization) {
  if (!enabled()) return true;
  static const std::string prefix = "Bearer ";
  if (authorization.size() <= prefix.size() || authorization.compare(0, prefix.size(), prefix) != 0)
    return false;
  std::string presented = trim(authorization.substr(prefix.size()));
  std::lock_guard<std::mutex> l(mu_);
  reload_if_changed();
  bool ok = false;
  for (const auto& t : tokens_)
    if (t.size() == presented.size() && CRYPTO_memcmp(t.data(), presented.data(), t.size()) == 0)
      ok = true;
  return ok;
}

}  // namespace dpfsim
