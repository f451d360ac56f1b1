# PGXS build of nico_extsvc. The C++ parts are built by CMake into
# $(BUILD_DIR); this Makefile drives that build and installs the result the
# PGXS way. `make` builds what ships (the extension's module and its SQL
# scripts) and nothing else; the rest is asked for by name:
#   make sim          dpfsim, the cluster simulator (scripts/demo.sh, the e2e tests)
#   make tests        the GoogleTest binaries and dpfsim (what `make check-unit` runs)
#   make integration-tests  the reconciler and dpfsim tests and dpfsim (what the
#                     test command builds with GCC; it runs the unit and client
#                     tests in its sanitizer build)
#   make bench-tools  dpfsim, dpfsim_load and client_overhead (bench/)
#   make dist         the PGXN source archive $(EXTENSION)-<version>.zip of HEAD
EXTENSION  = nico_extsvc
EXTVERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
BUILD_DIR ?= build
CMAKE     ?= cmake
CMAKE_BUILD_TYPE ?= RelWithDebInfo
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)

SQL_PARTS  = $(sort $(wildcard sql/parts/*.sql))
# The install script of the current version and the upgrade scripts to it are
# generated: sql/nico_extsvc--$(EXTVERSION).sql from sql/parts, and
# sql/nico_extsvc--FROM--$(EXTVERSION).sql from sql/migrations/FROM--$(EXTVERSION).sql
# plus the definitions of sql/parts (tools/sql_upgrade.py; docs/operator-guide.md,
# "Appendix: how upgrade scripts are made"). Scripts of released versions
# (sql/nico_extsvc--0.1.0.sql) are frozen files in git, installed as they are.
MIGRATIONS = $(sort $(wildcard sql/migrations/*--$(EXTVERSION).sql))
UPGRADES_built = $(patsubst sql/migrations/%.sql,sql/$(EXTENSION)--%.sql,$(MIGRATIONS))
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql $(UPGRADES_built)
DATA       = $(filter-out $(DATA_built),$(wildcard sql/$(EXTENSION)--*.sql))

REGRESS      = $(sort $(basename $(notdir $(wildcard regress/sql/*.sql))))
REGRESS_OPTS = --inputdir=$(BUILD_DIR)/regress-in --outputdir=$(BUILD_DIR)/regress-out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: cmake-build install-lib regress-links check-unit pgtap installcheck-nopreload sql-scripts \
        sim tests integration-tests bench-tools dist

all: cmake-build sql-scripts
sql-scripts: $(DATA_built)

# sql/parts itself: a removed or renamed part changes the directory, not a file
sql/$(EXTENSION)--$(EXTVERSION).sql: $(SQL_PARTS) sql/parts $(EXTENSION).control
	@{ echo "-- nico_extsvc $(EXTVERSION): generated from sql/parts/*.sql by make; do not edit."; \
	   printf '%s\n' '\echo Use "CREATE EXTENSION $(EXTENSION)" to load this file. \quit'; \
	   for f in $(SQL_PARTS); do echo; echo "-- ---- $$f"; cat $$f; done; } > $@

sql/$(EXTENSION)--%--$(EXTVERSION).sql: sql/migrations/%--$(EXTVERSION).sql sql/migrations/drop-definitions.sql \
    $(SQL_PARTS) sql/parts tools/sql_upgrade.py $(EXTENSION).control
	python3 tools/sql_upgrade.py $* $(EXTVERSION) sql/migrations/drop-definitions.sql $< $(SQL_PARTS) > $@.tmp
	mv $@.tmp $@

$(BUILD_DIR)/CMakeCache.txt:
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(CMAKE_BUILD_TYPE) -DPG_CONFIG=$(PG_CONFIG)

cmake-build: $(BUILD_DIR)/CMakeCache.txt
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target nico_extsvc
sim: $(BUILD_DIR)/CMakeCache.txt
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target dpfsim
tests: $(BUILD_DIR)/CMakeCache.txt
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target extsvc_tests
integration-tests: $(BUILD_DIR)/CMakeCache.txt
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target extsvc_integration_tests
bench-tools: $(BUILD_DIR)/CMakeCache.txt
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target extsvc_bench

install: install-lib
install-lib: cmake-build
	$(MKDIR_P) '$(DESTDIR)$(pkglibdir)'
	$(INSTALL_SHLIB) $(BUILD_DIR)/src/pg/$(EXTENSION).so '$(DESTDIR)$(pkglibdir)/$(EXTENSION).so'

installcheck: regress-links
regress-links:
	@mkdir -p $(BUILD_DIR)/regress-in $(BUILD_DIR)/regress-out
	@ln -sfn $(CURDIR)/regress/sql $(BUILD_DIR)/regress-in/sql
	@ln -sfn $(CURDIR)/expected $(BUILD_DIR)/regress-in/expected

# pg_regress against a server WITHOUT shared_preload_libraries = 'nico_extsvc'
# (SPEC 6: CREATE EXTENSION and the SQL API work without preloading):
# regress/nopreload/*.sql, expected output in expected/nopreload/.
REGRESS_NOPRELOAD = $(sort $(basename $(notdir $(wildcard regress/nopreload/*.sql))))
installcheck-nopreload:
	@mkdir -p $(BUILD_DIR)/regress-nopreload-in $(BUILD_DIR)/regress-nopreload-out
	@ln -sfn $(CURDIR)/regress/nopreload $(BUILD_DIR)/regress-nopreload-in/sql
	@ln -sfn $(CURDIR)/expected/nopreload $(BUILD_DIR)/regress-nopreload-in/expected
	$(pg_regress_installcheck) --inputdir=$(BUILD_DIR)/regress-nopreload-in \
	  --outputdir=$(BUILD_DIR)/regress-nopreload-out --dbname=$(CONTRIB_TESTDB) $(REGRESS_NOPRELOAD)

check-unit: tests
	cd $(BUILD_DIR) && ctest --output-on-failure

pgtap:
	pg_prove --ext .sql -v regress/pgtap/

clean: clean-cmake
clean-cmake:
	rm -rf $(BUILD_DIR) $(DATA_built)

# PGXN: the source archive of HEAD (committed files only), what .gitattributes
# does not mark export-ignore; META.json is checked against the control file
# first. scripts/check-dist.sh builds and installs from the unpacked archive.
DIST = $(EXTENSION)-$(EXTVERSION).zip
dist:
	scripts/check-meta.sh
	git archive --format zip --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(DIST) HEAD
