#!/usr/bin/env bash
# The install test (meson.build beside this folder): installs the build into a staging directory, then builds the
# example with nothing but what pkg-config says about the staged uroce.pc, as a program outside this tree would,
# and runs it on the staged default.yaml.
#   install_and_build.sh BUILD_DIR EXAMPLE.cc PREFIX LIBDIR DATADIR MANDIR SANITIZE CXX...
set -euo pipefail
build_dir=$1 example=$2 prefix=$3 libdir=$4 datadir=$5 mandir=$6 sanitize=$7
shift 7
cxx=("$@")

stage=$build_dir/install-test
rm -rf "$stage"
mkdir -p "$stage/src"
echo "== meson install --destdir $stage"
meson install -C "$build_dir" --destdir "$stage" --quiet

# Everything an outside program relies on is in place.
root=$stage$prefix
for path in "$root/include/uroce/api/ndk.h" "$root/include/uroce/api/ndk_types.h" "$root/include/uroce/config/config.h" \
  "$root/$libdir/liburoce.a" "$root/$libdir/liburoce.so" "$root/$libdir/pkgconfig/uroce.pc" \
  "$root/$datadir/uroce/default.yaml" "$root/bin/uroce-perf" "$root/bin/uroce-pingpong" "$root/bin/uroce-rping" \
  "$root/bin/uroce-nvmf-target"; do
  [ -e "$path" ] || { echo "FAIL: meson install did not put $path in place" >&2; exit 1; }
done
ls "$root/$datadir/uroce/examples/"*.yaml >/dev/null
# A man page per installed tool, where the build made them (it does whenever python3 is there).
if [ -d "$build_dir/apps/man" ]; then
  for tool in "$root/bin/"uroce-*; do
    page=$root/$mandir/man1/$(basename "$tool").1
    [ -s "$page" ] || { echo "FAIL: no man page $page for $tool" >&2; exit 1; }
  done
fi
# Only the public headers: nothing of the dataplane, the protocol or the provider's internals.
unexpected=$(cd "$root/include/uroce" && find . -type f | grep -v -x -F -e ./api/ndk.h -e ./api/ndk_types.h -e ./config/config.h || true)
[ -z "$unexpected" ] || { echo "FAIL: headers installed beyond the public API: $unexpected" >&2; exit 1; }

# The example is compiled from a copy, so no relative include can reach back into the source tree.
cp "$example" "$stage/src/ring_link_rc.cc"
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
cflags=$(pkg-config --cflags uroce)
libs=$(pkg-config --libs uroce)
static_libs=$(pkg-config --static --libs uroce)
echo "pkg-config --cflags uroce: $cflags"
echo "pkg-config --libs uroce: $libs"
# Outside the staged files (which sit in the build tree), no flag may point into the source or the build tree.
source_root=$(cd "$(dirname "$example")/../.." && pwd)
outside_stage=$(echo "$cflags $libs $static_libs" | sed "s|$stage/||g")
case "$outside_stage" in
  *"$source_root"* | *"$build_dir"*) echo "FAIL: uroce.pc points into the source or build tree" >&2 && exit 1 ;;
esac
sanitizer_flags=()
[ "$sanitize" = none ] || sanitizer_flags=("-fsanitize=$sanitize")
flags=(-std=c++20 -O2 -Wall -Wextra -Werror "${sanitizer_flags[@]}")

cd "$stage/src"
echo "== shared: ${cxx[*]} ${flags[*]} ring_link_rc.cc \$(pkg-config --cflags --libs uroce)"
# shellcheck disable=SC2086 # pkg-config's output is a list of flags
"${cxx[@]}" "${flags[@]}" ring_link_rc.cc $cflags $libs -o example-shared
readelf -d example-shared | grep -q 'NEEDED.*liburoce\.so' || { echo "FAIL: not linked to liburoce.so" >&2; exit 1; }
echo "== static: ${cxx[*]} ${flags[*]} ring_link_rc.cc \$(pkg-config --cflags uroce) liburoce.a \$(pkg-config --static --libs uroce)"
# The archive first; --as-needed then drops the -luroce that --libs also names, which nothing needs any more.
# shellcheck disable=SC2086
"${cxx[@]}" "${flags[@]}" ring_link_rc.cc $cflags -Wl,--as-needed "$root/$libdir/liburoce.a" $static_libs -o example-static
if readelf -d example-static | grep -q 'NEEDED.*liburoce'; then
  echo "FAIL: the static example still needs liburoce.so" >&2
  exit 1
fi

for variant in shared static; do
  echo "== example-$variant $root/$datadir/uroce/default.yaml"
  LD_LIBRARY_PATH=$root/$libdir ./example-$variant "$root/$datadir/uroce/default.yaml" | tee "$variant.out"
  grep -q '^all transfers checked$' "$variant.out"
done
echo "PASS"
