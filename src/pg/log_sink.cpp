#include "pg_prelude.hpp"

#include "log_sink.hpp"

#include "guard.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "kube/error.hpp"

namespace extsvc::pg {

namespace {

struct Line {
  int level;
  std::string text;
};

std::vector<Line>* g_lines = nullptr;  // never destroyed: lives until process exit

class BufferSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (g_lines->size() >= 10000) return;  // a runaway loop must not eat memory
    g_lines->push_back({static_cast<int>(msg.level),
                        kube::redact(std::string_view(msg.payload.data(), msg.payload.size()))});
  }
  void flush_() override {}
};

}  // namespace

void install_log_sink(const char* worker_name) {
  if (g_lines != nullptr) return;
  PendingError err;
  cpp_call(err, [&] {
    auto lines = std::make_unique<std::vector<Line>>();
    auto logger = std::make_shared<spdlog::logger>(worker_name, std::make_shared<BufferSink>());
    spdlog::set_default_logger(std::move(logger));
    g_lines = lines.release();
  });
  raise_if(err);
}

void set_log_level(int spdlog_level) {
  spdlog::set_level(static_cast<spdlog::level::level_enum>(spdlog_level));
}

void flush_logs() {
  if (g_lines == nullptr || g_lines->empty()) return;
  // Copy to palloc'd memory first: ereport below must not run while a
  // std::string it reads could be destroyed by an unwinding longjmp.
  const size_t n = g_lines->size();
  int* levels = static_cast<int*>(palloc(sizeof(int) * n));
  char** texts = static_cast<char**>(palloc(sizeof(char*) * n));
  for (size_t i = 0; i < n; ++i) {
    levels[i] = (*g_lines)[i].level;
    texts[i] = pstrdup((*g_lines)[i].text.c_str());
  }
  g_lines->clear();
  for (size_t i = 0; i < n; ++i) {
    // spdlog already filtered by extsvc.log_level: what reaches here is wanted.
    const int elevel = levels[i] >= spdlog::level::warn ? WARNING : LOG;
    ereport(elevel, (errmsg_internal("nico_extsvc: %s", texts[i])));
    pfree(texts[i]);
  }
  pfree(levels);
  pfree(texts);
}

}  // namespace extsvc::pg
