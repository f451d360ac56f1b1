// Bearer-token authentication backed by a file that may be rotated at any time.
#pragma once

#include <sys/stat.h>

#include <mutex>
#include <string>
#include <vector>

namespace dpfsim {

class TokenAuth {
 public:
  TokenAuth() = default;
  explicit TokenAuth(std::string path) : path_(std::move(path)) {}
  // Call before serving requests.
  void set_path(std::string path) { path_ = std::move(path); }
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // authorization: the raw Authorization header value. Re-reads the file when its mtime/size/inode
  // change. Each non-empty line of the file is an accepted token.
  bool check(const std::string& authorization);

 private:
  void reload_if_changed();
  std::string path_;
  std::mutex mu_;
  bool loaded_ = false;
  struct timespec mtime_ {};
  off_t size_ = -1;
  ino_t ino_ = 0;
  std::vector<std::string> tokens_;
};

}  // namespace dpfsim
