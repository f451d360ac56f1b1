// The fuzz targets, one function per target. Each takes arbitrary bytes, must
// never crash, leak or trip a sanitizer, and checks properties of the code
// under test with FUZZ_CHECK. test/fuzz/CMakeLists.txt wraps each one into a
// libFuzzer executable fuzz_<name>.
#pragma once

#include <cstddef>
#include <cstdint>

namespace extsvc::fuzz {

int strict_json(const std::uint8_t* data, std::size_t size);
int helm_chart_data(const std::uint8_t* data, std::size_t size);
int repo_url(const std::uint8_t* data, std::size_t size);
int semver(const std::uint8_t* data, std::size_t size);
int quantity(const std::uint8_t* data, std::size_t size);
int merge_patch(const std::uint8_t* data, std::size_t size);
int kubeconfig(const std::uint8_t* data, std::size_t size);
int kube_status(const std::uint8_t* data, std::size_t size);
int kube_list(const std::uint8_t* data, std::size_t size);
int watch_events(const std::uint8_t* data, std::size_t size);

}  // namespace extsvc::fuzz
