#!/usr/bin/perl
# The figures tables of benchmarks/README.md, generated from the benchmark binaries' JSON output.
#
#   perl scripts/bench-tables.pl [--build-dir build-bench]
#       runs core_bench and sim_bench (sim_bench: the LLaMA-7B cases only) with
#       --benchmark_format=json and rewrites every block between <!-- table:NAME --> and
#       <!-- /table --> in benchmarks/README.md, timing columns included (about 2 minutes).
#   perl scripts/bench-tables.pl --check [--build-dir build]
#       runs only the cheap cases, once each, and compares their deterministic counters (op,
#       collective, module and flow counts, heap and JSON bytes, simulated step times) with the
#       README's tables. Fails naming the table, row and column. Registered as a CTest test when the
#       benchmarks are built, so the documented figures cannot drift from the code.
#
# Only Perl core modules: runs on plain Debian bookworm.
use strict;
use warnings;
use utf8;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use JSON::PP;

my $repo = abs_path(dirname(abs_path($0)) . '/..');
my $readme = "$repo/benchmarks/README.md";

# --- number formatting (the README's conventions) ------------------------------------------------

sub thousands {
  my ($n) = @_;
  my $text = sprintf('%.0f', $n);
  1 while $text =~ s/^(-?\d+)(\d{3})/$1,$2/;
  return $text;
}

# Three significant digits, without trailing exponent noise: 5.28, 53.1, 451, 1,045.
sub sig3 {
  my ($x) = @_;
  return '0' if $x == 0;
  my $digits = 2 - int(POSIX::floor(log(abs $x) / log(10)));
  return thousands($x) if $digits <= 0;
  return sprintf('%.*f', $digits, $x);
}

sub mib { return sig3($_[0]) . ' MiB' }

# Seconds with a unit: 6.93 ms, 0.432 ms, 1.48 s, 43.2 µs.
sub duration {
  my ($seconds, $smallest) = @_;
  $smallest //= 'ms';
  return sig3($seconds) . ' s' if $seconds >= 1;
  return sig3($seconds * 1e6) . ' µs' if $smallest eq 'µs' && $seconds < 1e-3;
  return sig3($seconds * 1e3) . ' ms';
}

sub seconds_of {
  my ($bench) = @_;
  my %scale = (ns => 1e-9, us => 1e-6, ms => 1e-3, s => 1);
  return $bench->{real_time} * $scale{$bench->{time_unit}};
}

# --- the tables ----------------------------------------------------------------------------------
#
# Each table: the binary and the benchmarks it needs (a regex for --benchmark_filter), its rows (one
# benchmark name each, the row's key cells), its columns (header, cell from the benchmark's JSON,
# whether it is checked: 1 exactly, a fraction within that relative tolerance, 0 not (timings,
# high-water marks), and the alignment when not right-aligned), and
# `cheap`, the rows the CTest runs.

# Heap from mallinfo2 moves in the third digit with the allocator's history (which chunks were
# mmapped, which came from the arena), e.g. 0.949 / 0.950 MiB between runs: compared within 1%,
# which still catches real growth (the 5.28 -> 5.69 MiB drift this check was written for is 8%).
my $heap_tolerance = 0.01;

my @world_sizes = (2, 4, 16, 64, 256, 1024, 4096, 16384);
my @layer_counts = (10, 100, 1000, 10000);
my %plan_label = (DDP => 'DDP', FSDP => 'FSDP (wrap policy)', FSDP_AC_PerLayer => 'FSDP + AC per layer');
my @sim_ranks = (8, 64, 256, 1024, 4096, 16384);

my @tables = (
  {
    name => 'world-size',
    binary => 'core_bench',
    rows => [map { { bench => "BM_PlanWorld_GPT3_FSDP_TP/$_", key => { ranks => thousands($_) } } } @world_sizes],
    cheap => sub { 1 },
    columns => [
      ['ranks', sub { thousands($_[0]{world}) }, 1],
      ['tp', sub { $_[0]{tp} == 1 ? '1 (degenerate)' : thousands($_[0]{tp}) }, 1],
      ['ops', sub { thousands($_[0]{ops}) }, 1],
      ['collectives', sub { thousands($_[0]{collectives}) }, 1],
      ['time', sub { duration(seconds_of($_[0])) }, 0],
      ['heap', sub { mib($_[0]{heap_MiB}) }, $heap_tolerance],
    ],
  },
  {
    name => 'program-json',
    binary => 'core_bench',
    rows => [{ bench => 'BM_ProgramJson_GPT3_FSDP_TP/16384', key => { ranks => '16,384' } }],
    cheap => sub { 1 },
    columns => [
      ['ranks', sub { thousands($_[0]{world}) }, 1],
      ['ops', sub { thousands($_[0]{ops}) }, 1],
      ['`program_to_json(...).dump()`', sub { duration(seconds_of($_[0])) }, 0],
      ['JSON', sub { mib($_[0]{json_MiB}) }, 1],
      ['peak RSS so far', sub { mib($_[0]{rss_MiB}) }, 0],
    ],
  },
  {
    name => 'load-model',
    binary => 'core_bench',
    rows => [{ bench => 'BM_LoadModel_GPT3', key => { case => '`load_model("zoo:gpt3-175b")`' } }],
    cheap => sub { 1 },
    columns => [
      ['case', sub { '`load_model("zoo:gpt3-175b")`' }, 1, '---'],
      ['modules', sub { thousands($_[0]{modules}) }, 1],
      ['parameters', sub { thousands($_[0]{params}) }, 1],
      ['time', sub { duration(seconds_of($_[0])) }, 0],
    ],
  },
  {
    name => 'model-layers',
    binary => 'core_bench',
    # Two benchmarks per row: the document (time only) and the parse (time and modules).
    rows => [map { { bench => "BM_ParseModel_Llama/$_", also => "BM_ModelDocument_Llama/$_",
                     key => { layers => thousands($_) } } } @layer_counts],
    cheap => sub { $_[0]{layers} ne "10,000" },  # the parse of 1,000 layers takes 25 ms
    columns => [
      ['layers', sub { thousands($_[0]{layers}) }, 1],
      ['modules', sub { thousands($_[0]{modules}) }, 1],
      ['`transformer_document`', sub { duration(seconds_of($_[1])) }, 0],
      ['`parse_model`', sub { duration(seconds_of($_[0])) }, 0],
    ],
  },
  {
    name => 'layer-count',
    binary => 'core_bench',
    rows => [map { my $plan = $_; map { { bench => "BM_PlanLayers_$plan/$_",
                                           key => { layers => thousands($_), plan => $plan_label{$plan} } } } @layer_counts }
             qw(DDP FSDP FSDP_AC_PerLayer)],
    cheap => sub { $_[0]{layers} !~ /,/ },  # 10 and 100 layers: the larger ones take seconds
    columns => [
      ['layers', sub { thousands($_[0]{layers}) }, 1],
      ['plan', sub { my ($plan) = $_[0]{name} =~ m{BM_PlanLayers_(\w+)/}; $plan_label{$plan} }, 1, '---'],
      ['time', sub { duration(seconds_of($_[0])) }, 0],
      # From the wall time, as the time column (the benchmark's own per_layer counter uses CPU time).
      ['per layer', sub { duration(seconds_of($_[0]) / $_[0]{layers}, 'µs') }, 0],
      ['ops', sub { thousands($_[0]{ops}) }, 1],
      ['collectives', sub { thousands($_[0]{collectives}) }, 1],
      ['heap', sub { mib($_[0]{heap_MiB}) }, $heap_tolerance],
      ['peak RSS so far', sub { mib($_[0]{rss_MiB}) }, 0],
    ],
  },
  {
    name => 'sim-llama7b',
    binary => 'sim_bench',
    rows => [
      (map { { bench => "BM_Simulate_Llama7B_FSDP/$_", key => { case => 'LLaMA-2 7B FSDP (per block), 1 step', ranks => thousands($_) } } } @sim_ranks),
      (map { { bench => "BM_Simulate_Llama7B_DDP_TP/$_", key => { case => 'LLaMA-2 7B TP 8 x DDP, 2 steps', ranks => thousands($_) } } } (16, @sim_ranks[1 .. $#sim_ranks])),
    ],
    cheap => sub { $_[0]{ranks} !~ /^(4,096|16,384)$/ },  # up to 1,024 ranks: under 0.3 s each
    columns => [
      ['case', sub { $_[0]{name} =~ /FSDP/ ? 'LLaMA-2 7B FSDP (per block), 1 step' : 'LLaMA-2 7B TP 8 x DDP, 2 steps' }, 1, '---'],
      ['ranks', sub { thousands($_[0]{world}) }, 1],
      ['wall', sub { duration(seconds_of($_[0])) }, 0],
      ['child RSS', sub { $_[0]{child_rss_shown} ? mib($_[0]{child_rss_MiB}) : '—' }, 0],
      ['flows', sub { thousands($_[0]{flows}) }, 1],
      ['folded', sub { thousands($_[0]{folded_nodes}) }, 1],
      ['instances', sub { thousands($_[0]{collectives}) }, 1],
      ['simulated step', sub { sprintf('%.6g s', $_[0]{step_s}) }, 1],
    ],
  },
);

# --- running the benchmarks ----------------------------------------------------------------------

# Runs BINARY on exactly the named benchmarks; returns name -> JSON object (iteration runs) and
# name -> aggregate (the _BigO rows).
sub run_benchmarks {
  my ($build, $binary, $names, $extra) = @_;
  my $path = "$build/benchmarks/$binary";
  die "$path not found: build it first (ninja -C $build $binary)\n" unless -x $path;
  # Fixed-iteration benchmarks carry suffixes: BM_Simulate_Llama7B_FSDP/8/iterations:1/real_time.
  my $filter = '^(' . join('|', map { s{([.^$|()*+?{}\[\]\\])}{\\$1}gr } @$names) . ')(/iterations:[0-9]+)?(/real_time)?$';
  my @command = ($path, "--benchmark_filter=$filter", '--benchmark_format=json', @$extra);
  print STDERR "bench-tables: running @command\n";
  open(my $fh, '-|', @command) or die "cannot run $path: $!\n";
  my $text = do { local $/; <$fh> };
  close $fh or die "$binary failed (status $?)\n";
  my $doc = decode_json($text);
  my %by_name;
  for my $bench (@{ $doc->{benchmarks} }) {
    next unless ($bench->{run_type} // 'iteration') eq 'iteration';
    (my $name = $bench->{name}) =~ s{(/iterations:\d+)?(/real_time)?$}{};
    $by_name{$name} = $bench;
  }
  for my $name (@$names) { die "$binary did not report $name\n" unless $by_name{$name}; }
  return \%by_name;
}

sub names_of {
  my ($table, $rows) = @_;
  return map { ($_->{bench}, $_->{also} ? $_->{also} : ()) } @$rows;
}

# --- the README's tables -------------------------------------------------------------------------

sub read_readme {
  open(my $fh, '<:encoding(UTF-8)', $readme) or die "cannot read $readme: $!\n";
  local $/;
  return <$fh>;
}

sub table_block {
  my ($text, $name) = @_;
  $text =~ /<!-- table:\Q$name\E -->\n(.*?)<!-- \/table -->/s
    or die "benchmarks/README.md has no block <!-- table:$name --> ... <!-- /table -->\n";
  return $1;
}

# Markdown table rows as hashes keyed by header, in order.
sub parse_markdown_table {
  my ($block) = @_;
  my @lines = grep { /^\|/ } split /\n/, $block;
  my @split = map { my $l = $_; $l =~ s/^\|\s*//; $l =~ s/\s*\|\s*$//; [split /\s*\|\s*/, $l, -1] } @lines;
  my $header = shift @split;
  shift @split;  # the alignment row
  my @rows;
  for my $cells (@split) {
    my %row;
    @row{@$header} = map { s/\*\*//gr } @$cells;
    push @rows, \%row;
  }
  return ($header, \@rows);
}

sub render_table {
  my ($table, $results) = @_;
  my @headers = map { $_->[0] } @{ $table->{columns} };
  my @lines = ('| ' . join(' | ', @headers) . ' |', '|' . join('|', map { $_->[3] // '---:' } @{ $table->{columns} }) . '|');
  for my $row (@{ $table->{rows} }) {
    my @args = ($results->{ $row->{bench} }, $row->{also} ? $results->{ $row->{also} } : ());
    push @lines, '| ' . join(' | ', map { $_->[1]->(@args) } @{ $table->{columns} }) . ' |';
  }
  return join("\n", @lines) . "\n";
}

# child_rss_MiB is a high-water mark over the process's children: only a case that raises it
# measured itself. Marks the others so their cell reads "—".
sub mark_child_rss {
  my ($results, $order) = @_;
  my $high = 0;
  for my $name (@$order) {
    my $bench = $results->{$name} or next;
    $bench->{child_rss_shown} = $bench->{child_rss_MiB} > $high ? 1 : 0;
    $high = $bench->{child_rss_MiB} if $bench->{child_rss_MiB} > $high;
  }
}

# --- modes ---------------------------------------------------------------------------------------

sub regenerate {
  my ($build) = @_;
  my %results;
  for my $binary (qw(core_bench sim_bench)) {
    my @names = map { names_of($_, $_->{rows}) } grep { $_->{binary} eq $binary } @tables;
    my $found = run_benchmarks($build, $binary, \@names, ['--benchmark_counters_tabular=true']);
    %results = (%results, %$found);
  }
  mark_child_rss(\%results, [map { $_->{bench} } @{ (grep { $_->{name} eq 'sim-llama7b' } @tables)[0]{rows} }]);
  my $text = read_readme();
  for my $table (@tables) {
    table_block($text, $table->{name});  # dies when the markers are missing
    my $rendered = render_table($table, \%results);
    $text =~ s/(<!-- table:\Q$table->{name}\E -->\n).*?(<!-- \/table -->)/$1$rendered$2/s;
  }
  open(my $fh, '>:encoding(UTF-8)', $readme) or die "cannot write $readme: $!\n";
  print $fh $text;
  close $fh or die "cannot write $readme: $!\n";
  print "bench-tables: rewrote the tables of benchmarks/README.md\n";
}

# Two cells such as '5.68 MiB' and '5.69 MiB': same unit, numbers within a relative tolerance.
sub within {
  my ($left, $right, $tolerance) = @_;
  my ($x, $unit_x) = $left =~ /^([\d,.]+)\s*(.*)$/ or return 0;
  my ($y, $unit_y) = $right =~ /^([\d,.]+)\s*(.*)$/ or return 0;
  tr/,//d for $x, $y;
  return $unit_x eq $unit_y && abs($x - $y) <= $tolerance * abs($y);
}

sub check {
  my ($build) = @_;
  my $text = read_readme();
  my @problems;
  my $compared = 0;
  for my $binary (qw(core_bench sim_bench)) {
    my (@work, @names);
    for my $table (grep { $_->{binary} eq $binary } @tables) {
      my ($header, $documented) = parse_markdown_table(table_block($text, $table->{name}));
      my @expected_headers = map { $_->[0] } @{ $table->{columns} };
      if ("@$header" ne "@expected_headers") {
        push @problems, "table '$table->{name}': columns are (@$header), expected (@expected_headers)";
        next;
      }
      # Pair each documented row with its benchmark by the row's key cells.
      for my $row (@{ $table->{rows} }) {
        my @keys = sort keys %{ $row->{key} };
        my ($doc_row) = grep { my $d = $_; !grep { ($d->{$_} // '') ne $row->{key}{$_} } @keys } @$documented;
        my $label = join(', ', map { "$_ $row->{key}{$_}" } @keys);
        if (!$doc_row) {
          push @problems, "table '$table->{name}': no row for $label";
          next;
        }
        next unless $table->{cheap}->($doc_row);
        push @work, [$table, $row, $doc_row, $label];
        push @names, names_of($table, [$row]);
      }
    }
    next unless @names;
    my $results = run_benchmarks($build, $binary, \@names, ['--benchmark_min_time=0.001']);
    for my $item (@work) {
      my ($table, $row, $doc_row, $label) = @$item;
      my @args = ($results->{ $row->{bench} }, $row->{also} ? $results->{ $row->{also} } : ());
      for my $column (grep { $_->[2] } @{ $table->{columns} }) {
        my ($header, $cell, $tolerance) = @$column;
        my $now = $cell->(@args);
        ++$compared;
        next if $now eq $doc_row->{$header};
        next if $tolerance < 1 && within($now, $doc_row->{$header}, $tolerance);
        push @problems, "table '$table->{name}', row ($label), column '$header': README says "
          . "'$doc_row->{$header}', $binary now gives '$now'";
      }
    }
  }
  if (@problems) {
    print "$_\n" for @problems;
    print "benchmarks/README.md has drifted from the code: build the benchmarks in Release "
      . "(build-bench, see the README) and run `perl scripts/bench-tables.pl` to regenerate its tables.\n";
    exit 1;
  }
  print "bench-tables: $compared documented counters match the benchmarks\n";
}

use POSIX ();
binmode STDOUT, ":encoding(UTF-8)";
binmode STDERR, ":encoding(UTF-8)";
my $mode = 'regenerate';
my $build;
while (@ARGV) {
  my $arg = shift @ARGV;
  if ($arg eq '--check') { $mode = 'check'; }
  elsif ($arg eq '--build-dir') { $build = shift @ARGV; }
  elsif ($arg =~ /^--build-dir=(.*)/) { $build = $1; }
  else { die "usage: $0 [--check] [--build-dir DIR]\n"; }
}
$build //= $mode eq 'check' ? "$repo/build" : "$repo/build-bench";
$build = abs_path($build) // die "no build directory $build\n";
$mode eq 'check' ? check($build) : regenerate($build);
