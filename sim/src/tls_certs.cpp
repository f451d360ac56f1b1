#include "tls_certs.h"

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace dpfsim {

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("tls: " + what);
}

PkeyPtr make_key() {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (!k) fail("key generation failed");
  return PkeyPtr(k);
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) fail(std::string("bad extension ") + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509Ptr make_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca) {
  X509Ptr cert(X509_new());
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("dpfsim"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509* iss = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(iss));
  add_ext(cert.get(), iss, NID_subject_key_identifier, "hash");
  if (ca) {
    add_ext(cert.get(), iss, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(cert.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
  } else {
    add_ext(cert.get(), iss, NID_authority_key_identifier, "keyid:always");
    add_ext(cert.get(), iss, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(cert.get(), iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    add_ext(cert.get(), iss, NID_ext_key_usage, "serverAuth");
    add_ext(cert.get(), iss, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1");
  }
  if (!X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256())) fail("X509_sign");
  return cert;
}

void write_cert(const std::string& path, X509* cert) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) fail("cannot write " + path);
  PEM_write_X509(f, cert);
  fclose(f);
}

void write_key(const std::string& path, EVP_PKEY* key) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) fail("cannot write " + path);
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  fclose(f);
}

}  // namespace

TlsFiles generate_tls_files(const std::string& dir_in) {
  std::filesystem::create_directories(dir_in);
  std::string dir = std::filesystem::absolute(dir_in).lexically_normal().string();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  PkeyPtr ca_key = make_key();
  X509Ptr ca = make_cert(ca_key.get(), "dpfsim-ca", nullptr, nullptr, true);
  PkeyPtr srv_key = make_key();
  X509Ptr srv = make_cert(srv_key.get(), "localhost", ca.get(), ca_key.get(), false);
  TlsFiles out{dir + "/ca.crt", dir + "/server.crt", dir + "/server.key"};
  write_cert(out.ca_cert, ca.get());
  write_cert(out.server_cert, srv.get());
  write_key(out.server_key, srv_key.get());
  return out;
}

}  // namespace dpfsim
