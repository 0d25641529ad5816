#!/usr/bin/env bash
# Installs what codefleet needs to build and test, then fetches the Apache
# Kafka broker jars from Maven Central into a cache outside git.
#
# Usage: deploy/install.sh [--no-kafka] [--force-kafka]
#   --no-kafka      only the Debian packages
#   --force-kafka   fetch the Kafka jars again even if the cache is complete
# Environment: CODEFLEET_CACHE (default ~/.cache/codefleet).
#
# Idempotent and quiet when everything is there (dpkg-query first, so a
# second run costs well under a second).  Never prompts.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fetch_kafka=1
force_kafka=0
while (($#)); do
    case $1 in
    --no-kafka) fetch_kafka=0 ;;
    --force-kafka) force_kafka=1 ;;
    -h | --help)
        sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) cf_die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

packages=(build-essential cmake ninja-build pkg-config librdkafka-dev libmsgpack-dev libseccomp-dev
    libhiredis-dev libcmocka-dev libjansson-dev libinih-dev libssl-dev redis-server redis-tools kcat bubblewrap
    python3 nodejs ca-certificates slirp4netns iproute2 clang-14 libfuzzer-14-dev libclang-rt-14-dev)
# Any Java 17+ runtime will do: only ask for Debian's default when none is there.
command -v java >/dev/null 2>&1 || packages+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || packages+=(maven)

install_packages() {
    local missing=() pkg status
    for pkg in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
        [[ $status == ii* ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0

    local -a sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || cf_die "missing packages (${missing[*]}) and not root; install them as root"
        sudo=(sudo -n) # -n: fail instead of prompting (CI has no stdin)
    fi
    cf_log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q </dev/null >/dev/null
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >/dev/null
}

kafka_complete() {
    [[ -f $CF_KAFKA_STAMP && -f $CF_KAFKA_LIBS/kafka_2.13-$CF_KAFKA_VERSION.jar ]]
}

fetch_kafka_jars() {
    if ((!force_kafka)) && kafka_complete; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || cf_die "mvn not found"
    mkdir -p "$CF_KAFKA_HOME"
    # One fetch at a time: CI jobs may share the cache.
    exec 9>"$CF_KAFKA_HOME/.lock"
    flock 9
    if ((!force_kafka)) && kafka_complete; then
        exec 9>&-
        return 0
    fi
    cf_log "fetching Apache Kafka $CF_KAFKA_VERSION from Maven Central into $CF_KAFKA_LIBS"
    local tmp=$CF_KAFKA_HOME/libs.tmp.$$
    rm -rf "$tmp"
    # The build dir of the helper pom also goes to the cache, not the repo.
    # Maven's output goes to a log (it is shown on failure only).
    local mvnlog=$CF_KAFKA_HOME/maven.log
    if ! mvn -B -q -f "$CF_REPO/deploy/kafka/pom.xml" \
        -Dkafka.version="$CF_KAFKA_VERSION" -Dcf.libs="$tmp" \
        -Dcf.target="$CF_KAFKA_HOME/target" \
        dependency:copy-dependencies </dev/null >"$mvnlog" 2>&1; then
        tail -n 40 "$mvnlog" >&2
        rm -rf "$tmp"
        cf_die "Maven could not resolve the Kafka jars (network?); full log: $mvnlog"
    fi
    local jar
    for jar in "kafka_2.13-$CF_KAFKA_VERSION.jar" "kafka-clients-$CF_KAFKA_VERSION.jar" \
        slf4j-reload4j-1.7.36.jar reload4j-1.2.25.jar; do
        [[ -f $tmp/$jar ]] || {
            rm -rf "$tmp"
            cf_die "Maven finished but $jar is missing"
        }
    done
    rm -rf "$CF_KAFKA_LIBS" "$CF_KAFKA_STAMP"
    mv "$tmp" "$CF_KAFKA_LIBS"
    # The stamp is written last: a half-done fetch is never taken as complete.
    printf 'kafka %s fetched %s\n' "$CF_KAFKA_VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$CF_KAFKA_STAMP"
    exec 9>&-
    cf_log "kafka jars ready ($(find "$CF_KAFKA_LIBS" -name '*.jar' | wc -l) jars)"
}

install_packages
((fetch_kafka)) && fetch_kafka_jars
exit 0
