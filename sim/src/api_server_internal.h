// KubeApiServer::Target and the helpers shared by the translation units of the API server
// (api_*.cpp), so that each stays small. Not used outside them.
#pragma once

#include <string>

#include "api_server.h"
#include "resources.h"
#include "store.h"

namespace dpfsim {

struct KubeApiServer::Target {
  enum Kind { Discovery, Health, OpenApi, Resource, Unknown } kind = Unknown;
  std::string doc;
  const ResourceInfo* ri = nullptr;
  std::string ns, name, sub;
  bool collection() const { return name.empty(); }
  std::string resource_label() const {
    switch (kind) {
      case Discovery:
        return "discovery";
      case Health:
        return "healthz";
      case OpenApi:
        return "openapi";
      case Resource:
        return sub.empty() ? ri->plural : ri->plural + "/" + sub;
      default:
        return "unknown";
    }
  }
};

namespace api_detail {

// Defined in api_server.cpp.
int find_socket_fd(int local_port, int remote_port);
void send(httplib::Response& res, int code, const std::string& body);

// Defined in api_request_options.cpp.
ListOptions list_options(const httplib::Request& req, const ResourceInfo& ri,
                         const std::string& ns);
DeleteOptions delete_options(const httplib::Request& req);

}  // namespace api_detail

}  // namespace dpfsim
