#!/usr/bin/env bash
# Planted-bug ("mutant") runner: proves that the tests catch each bug listed in tests/mutants/.
#
#   bash scripts/mutants.sh [--jobs N] [--keep] [NAME ...]   run the mutants (default: all)
#   bash scripts/mutants.sh --check [--build-dir DIR]        only validate the list (builds nothing)
#
# A run copies the working tree (tracked and untracked-but-not-ignored files, uncommitted edits
# included) into ONE scratch directory, configures a build there, and for each mutant: runs its
# test on the unmutated tree (ERROR if it fails there: a test that fails anyway proves nothing),
# swaps the original text for the mutant text in the one file that holds it, rebuilds the target,
# runs the test and records CAUGHT (test failed), SURVIVED (test passed) or BROKEN (the mutant
# does not compile), then restores the file. Exit status 0 only if every mutant was CAUGHT.
#
# Mutant file format (tests/mutants/<layer>-<short-name>.mutant):
#   # <one line: where, and what the bug changes, with the values: expected -> under the mutant>
#   target: <ninja target to rebuild>
#   test: <command run from the build directory that must FAIL under the mutant>
#   --- original
#   <exact source lines, verbatim; must occur exactly once in the tree>
#   --- mutant
#   <the replacement lines>
# Texts are matched byte for byte (no regex). Trailing blank lines of a section are dropped.
#
# Environment: MUTANT_TEST_TIMEOUT (seconds per test run, default 900; a test killed by the timeout
# counts as a failure, so a mutant that hangs the tests is CAUGHT). MUTANTS_TMPDIR (default TMPDIR,
# then /tmp) picks where the scratch directory goes; ccache only reuses the main build's objects
# when it sits under ccache's base_dir, e.g. MUTANTS_TMPDIR=$PWD/build-mutants-tmp (git ignores it).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
mutants_dir="$repo/tests/mutants"
jobs=$(nproc)
keep=0
check_only=0
check_build_dir=""
names=()
test_timeout=${MUTANT_TEST_TIMEOUT:-900}

usage() { sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --jobs=*) jobs=${1#--jobs=}; shift ;;
    --keep) keep=1; shift ;;
    --check) check_only=1; shift ;;
    --build-dir) check_build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "mutants: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) names+=("${1%.mutant}"); shift ;;
  esac
done

# The exact-text work is in Perl (perl-base is always present on Debian): shell tools would read
# the original text as a regex or trip over quotes, backslashes and multi-line originals.
#   perl -e "$mutant_perl" check FILE...        well-formedness only, one line per problem
#   perl -e "$mutant_perl" field FILE KEY       prints target / test / description
#   perl -e "$mutant_perl" locate ROOT LIST FILE   prints the one file (relative) holding the original
#   perl -e "$mutant_perl" apply ROOT LIST FILE    locates, then writes the mutant text into that file
# LIST is a NUL-separated list of paths relative to ROOT: the files searched.
read -r -d '' mutant_perl <<'PERL' || true
use strict;
use warnings;

sub slurp {
  my ($path) = @_;
  open(my $fh, '<:raw', $path) or die "cannot read $path: $!\n";
  local $/;
  my $text = <$fh>;
  close $fh;
  return defined $text ? $text : '';
}

# Returns (fields, errors): fields has description, target, test, original, mutant.
sub parse_mutant {
  my ($path) = @_;
  my @lines = split /\n/, slurp($path), -1;
  pop @lines if @lines && $lines[-1] eq '';
  my (%f, @errors, $section);
  my (@original, @mutant);
  for my $line (@lines) {
    if ($line eq '--- original') {
      push @errors, "'--- original' appears twice" if defined $section;
      $section = 'original';
      next;
    }
    if ($line eq '--- mutant') {
      push @errors, "'--- mutant' before '--- original'" unless defined $section && $section eq 'original';
      $section = 'mutant';
      next;
    }
    if (!defined $section) {
      if ($line =~ /^#\s*(.*\S)/) {
        if (defined $f{description}) { push @errors, "more than one description line (# ...)"; }
        else { $f{description} = $1; }
      } elsif ($line =~ /^(target|test):\s*(.*?)\s*$/) {
        push @errors, "'$1:' appears twice" if defined $f{$1};
        $f{$1} = $2;
      } elsif ($line !~ /^\s*$/) {
        push @errors, "unexpected header line: $line";
      }
    } elsif ($section eq 'original') {
      push @original, $line;
    } else {
      push @mutant, $line;
    }
  }
  pop @original while @original && $original[-1] =~ /^\s*$/;
  pop @mutant while @mutant && $mutant[-1] =~ /^\s*$/;
  $f{original} = join("\n", @original);
  $f{mutant} = join("\n", @mutant);
  push @errors, "no description line (# where: expected -> under the mutant)" unless defined $f{description};
  for my $key ('target', 'test') {
    push @errors, "no '$key:' line" unless defined $f{$key} && length $f{$key};
  }
  push @errors, "no '--- original' section" unless defined $section;
  push @errors, "no '--- mutant' section" unless defined $section && $section eq 'mutant';
  push @errors, "empty original text" if defined $section && $f{original} !~ /\S/;
  push @errors, "the mutant text is identical to the original" if defined $section && $f{original} eq $f{mutant};
  return (\%f, \@errors);
}

sub parse_or_die {
  my ($path) = @_;
  my ($f, $errors) = parse_mutant($path);
  die join('', map { "$path: $_\n" } @$errors) if @$errors;
  return $f;
}

# Every occurrence of the original text in the listed files, as [relative path, byte offset].
sub occurrences {
  my ($root, $list, $text) = @_;
  my @found;
  for my $rel (grep { length } split /\0/, slurp($list)) {
    my $content = slurp("$root/$rel");
    next if index($content, "\0") >= 0;  # binary
    my $at = index($content, $text);
    while ($at >= 0) {
      push @found, [$rel, $at];
      $at = index($content, $text, $at + 1);
    }
  }
  return @found;
}

sub locate {
  my ($root, $list, $path) = @_;
  my $f = parse_or_die($path);
  my @found = occurrences($root, $list, $f->{original});
  if (@found != 1) {
    my @shown = @found > 8 ? (@found[0 .. 7]) : @found;
    my $where = @found ? ": " . join(", ", map { "$_->[0]\@$_->[1]" } @shown) . (@found > 8 ? ", ..." : "") : "";
    die "$path: the original text occurs " . scalar(@found) . " times in the tree, not once$where\n";
  }
  return ($f, @{$found[0]});
}

my $command = shift @ARGV;
if ($command eq 'check') {
  my $bad = 0;
  for my $path (@ARGV) {
    my (undef, $errors) = parse_mutant($path);
    print "$path: $_\n" for @$errors;
    $bad = 1 if @$errors;
  }
  exit $bad;
} elsif ($command eq 'field') {
  my ($path, $key) = @ARGV;
  print parse_or_die($path)->{$key}, "\n";
} elsif ($command eq 'locate') {
  my (undef, $rel) = locate(@ARGV);
  print "$rel\n";
} elsif ($command eq 'apply') {
  my ($root, $list, $path) = @ARGV;
  my ($f, $rel, $at) = locate($root, $list, $path);
  my $content = slurp("$root/$rel");
  substr($content, $at, length $f->{original}) = $f->{mutant};
  open(my $fh, '>:raw', "$root/$rel") or die "cannot write $root/$rel: $!\n";
  print $fh $content;
  close $fh or die "cannot write $root/$rel: $!\n";
  print "$rel\n";
} else {
  die "unknown command $command\n";
}
PERL

mutant_tool() { perl -e "$mutant_perl" "$@"; }

# The files a mutant's original text is searched in, NUL-separated, relative to $1: the tracked and
# untracked-but-not-ignored files that exist, minus the mutant list itself (it quotes every
# original) and the Markdown docs (they may quote code).
list_tree_files() {
  local root=$1
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$root" ls-files -co --exclude-standard -z
  else  # an exported tarball: no git metadata
    (cd "$root" && find . -type f -not -path './build*' -not -path './.git/*' -printf '%P\0')
  fi | MUTANT_ROOT=$root perl -0ne 'chomp; print "$_\0" if -f "$ENV{MUTANT_ROOT}/$_" && !m{^tests/mutants/} && !/\.md$/'
}

selected_mutants() {
  local files=()
  if [ ${#names[@]} -eq 0 ]; then
    shopt -s nullglob
    files=("$mutants_dir"/*.mutant)
    shopt -u nullglob
  else
    local name
    for name in "${names[@]}"; do
      [ -f "$mutants_dir/$name.mutant" ] || { echo "mutants: no such mutant: $mutants_dir/$name.mutant" >&2; return 1; }
      files+=("$mutants_dir/$name.mutant")
    done
  fi
  [ ${#files[@]} -gt 0 ] || { echo "mutants: no mutant files in $mutants_dir" >&2; return 1; }
  printf '%s\n' "${files[@]}"
}

# --check: every file well formed, named <layer>-<short-name>.mutant, its original text found exactly
# once, and (with --build-dir) its target known to the build. Cheap: reads files, builds nothing.
run_check() {
  local files list problems=0 file name target
  mapfile -t files < <(selected_mutants)
  list=$(mktemp)
  list_tree_files "$repo" >"$list"
  for file in "${files[@]}"; do
    name=$(basename "$file")
    if ! [[ $name =~ ^[a-z0-9]+-[a-z0-9-]+\.mutant$ ]]; then
      echo "$file: name must be <layer>-<short-name>.mutant (lower case, digits, dashes)"
      problems=$((problems + 1))
    fi
    if ! mutant_tool check "$file"; then
      problems=$((problems + 1))
      continue
    fi
    if ! mutant_tool locate "$repo" "$list" "$file" >/dev/null; then
      problems=$((problems + 1))
      continue
    fi
    if [ -n "$check_build_dir" ]; then
      target=$(mutant_tool field "$file" target)
      if ! ninja -C "$check_build_dir" -t query "$target" >/dev/null 2>&1; then
        echo "$file: target '$target' is not a target of the build in $check_build_dir"
        problems=$((problems + 1))
      fi
    fi
  done 2>&1
  rm -f "$list"
  if [ "$problems" -gt 0 ]; then
    echo "mutants --check: $problems problem(s) in ${#files[@]} mutant file(s)"
    return 1
  fi
  echo "mutants --check: ${#files[@]} mutant file(s) well formed, each original found exactly once"
}

if [ "$check_only" = 1 ]; then
  run_check
  exit
fi

# --- a full run --------------------------------------------------------------------------------

mapfile -t mutant_files < <(selected_mutants)
run_check >/dev/null || { run_check; exit 1; }

# MUTANTS_TMPDIR rather than TMPDIR: the compilers would inherit TMPDIR and leave temporaries there.
scratch=$(mktemp -d "${MUTANTS_TMPDIR:-${TMPDIR:-/tmp}}/stratsim-mutants.XXXXXX")
tree="$scratch/tree"
# The build sits inside the copied tree, as build/ sits in the checkout, so the compile commands'
# paths relative to ccache's base_dir match the main build's and its cached objects are reused.
build="$tree/build"
logs="$scratch/logs"
cleanup() {
  if [ "$keep" = 1 ]; then
    echo "mutants: scratch kept in $scratch (logs in $logs)"
  else
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
trap 'echo; echo "mutants: interrupted" >&2; exit 130' INT TERM

mkdir -p "$tree" "$logs"
list_tree_files "$repo" >"$scratch/searched"
(cd "$repo" && git ls-files -co --exclude-standard -z | perl -0ne 'chomp; print "$_\0" if -f $_') |
  (cd "$repo" && tar --null -T - -cf -) | tar -xf - -C "$tree"

echo "mutants: ${#mutant_files[@]} mutant(s); scratch $scratch"
cmake_flags=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATSIM_BUILD_BENCHMARKS=OFF)
command -v ccache >/dev/null && cmake_flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if ! cmake -S "$tree" -B "$build" "${cmake_flags[@]}" >"$logs/configure.log" 2>&1; then
  echo "mutants: configuring the scratch build failed:" >&2
  tail -n 40 "$logs/configure.log" >&2
  exit 1
fi

# The end of a log that explains a verdict other than CAUGHT (the scratch directory, logs included,
# goes when the run ends unless --keep).
show_log_tail() {
  echo "----- last lines of $(basename "$1")"
  tail -n 25 "$1" | sed 's/^/  | /'
  echo "-----"
}

# The GoogleTest cases a caught mutant failed (the first three), for the table; "-" for other tests.
failed_tests() {
  perl -ne '$seen{$1}++ or push @names, $1 if m{^\[  FAILED  \] ([\w/]+\.[\w/]+)};
    END { my $more = @names > 3 ? " +" . (@names - 3) : ""; print @names ? join(",", @names[0 .. ($#names < 2 ? $#names : 2)]) . $more : "-" }' "$1"
}

# Runs a mutant's test command from the build directory; its status is the test's.
run_test() {
  local command=$1 log=$2
  (cd "$build" && timeout --kill-after=30 "$test_timeout" bash -c "$command") >"$log" 2>&1
}

results=()
failures=0
for file in "${mutant_files[@]}"; do
  name=$(basename "$file" .mutant)
  target=$(mutant_tool field "$file" target)
  test_command=$(mutant_tool field "$file" test)
  started=$SECONDS
  source_file=$(mutant_tool locate "$tree" "$scratch/searched" "$file")
  verdict=""
  caught_by=""
  # The unmutated tree first: the target must build and the test must pass on it. Always rebuilt:
  # the previous mutant may have left its objects in this target.
  echo "mutants: $name: building $target (unmutated)"
  if ! ninja -C "$build" -j "$jobs" "$target" >"$logs/$name.baseline-build.log" 2>&1; then
    verdict="ERROR (unmutated tree does not build)"
    show_log_tail "$logs/$name.baseline-build.log"
  fi
  if [ -z "$verdict" ] && ! run_test "$test_command" "$logs/$name.baseline-test.log"; then
    verdict="ERROR (test fails unmutated)"
    show_log_tail "$logs/$name.baseline-test.log"
  fi
  if [ -z "$verdict" ]; then
    cp -p "$tree/$source_file" "$scratch/pristine"
    mutant_tool apply "$tree" "$scratch/searched" "$file" >/dev/null
    echo "mutants: $name: building $target with the mutant in $source_file"
    if ! ninja -C "$build" -j "$jobs" "$target" >"$logs/$name.build.log" 2>&1; then
      verdict="BROKEN"
      show_log_tail "$logs/$name.build.log"
    elif run_test "$test_command" "$logs/$name.test.log"; then
      verdict="SURVIVED"
      show_log_tail "$logs/$name.test.log"
    else
      verdict="CAUGHT"
      caught_by=$(failed_tests "$logs/$name.test.log")
    fi
    # Back to the original bytes; the next build of the target recompiles it (ccache hit).
    mv "$scratch/pristine" "$tree/$source_file"
    touch "$tree/$source_file"
  fi
  [ "$verdict" = CAUGHT ] || failures=$((failures + 1))
  results+=("$name"$'\t'"$source_file"$'\t'"$verdict"$'\t'"$((SECONDS - started))"$'\t'"$caught_by")
  echo "mutants: $name: $verdict"
done

echo
{
  printf 'mutant\tfile\tverdict\tseconds\tfailed tests\n'
  printf '%s\n' "${results[@]}"
} | perl -F'\t' -lane 'push @rows, [@F]; for my $i (0 .. $#F) { $w[$i] = length $F[$i] if length $F[$i] > ($w[$i] // 0) }
  END { for my $r (@rows) { print join("  ", map { sprintf("%-*s", $w[$_], $r->[$_]) } 0 .. $#$r) =~ s/\s+$//r } }'
caught=$(( ${#mutant_files[@]} - failures ))
echo
echo "mutants: $caught of ${#mutant_files[@]} caught in ${SECONDS} s ($(date -u +%Y-%m-%d))"
[ "$failures" -eq 0 ]
