#!/bin/sh
# dpfsim(1) from `dpfsim --help` on stdin (the usage text is the reference;
# docs/dpfsim.md says the rest): the options verbatim, escaped for roff.
set -eu
version=$(dpkg-parsechangelog -S Version)
cat <<MAN
.TH DPFSIM 1 "" "nico-extsvc $version" "User Commands"
.SH NAME
dpfsim \- simulator of the NVIDIA DPF management and DPU clusters for nico_extsvc
.SH SYNOPSIS
.B dpfsim
[\fIOPTION\fR]...
.SH DESCRIPTION
dpfsim serves two Kubernetes REST API endpoints, the DPF management cluster and
the DPU cluster, runs simulated DPF behaviour in-process and serves a plain-HTTP
control API for tests. When every port listens it writes one JSON line with the
three URLs to stdout; logs go to stderr.
.SH OPTIONS
.nf
MAN
sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
cat <<'MAN'
.fi
.SH SEE ALSO
/usr/share/doc/nico-extsvc-dpfsim/dpfsim.md
MAN
