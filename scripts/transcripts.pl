#!/usr/bin/perl
# The command transcripts in the documentation, run as tests (in the spirit of SimGrid's .tesh
# files), so the docs cannot drift from the tool.
#
#   perl scripts/transcripts.pl [--build-dir build] FILE.md...
#
# A transcript is a fenced code block whose first line starts with "$ ". Each "$ COMMAND" line is
# run with sh from tests/data/readme/ (the fixture files the docs name live there), with the
# command's leading `stratsim` or `stratsim-view` replaced by the binary in the build directory,
# stdout and stderr merged. The lines after it, up to the next "$ " line or the block's end, are
# its exact expected output (trailing blanks ignored). In an expected line, "…" (U+2026) matches
# any text, for what varies between runs (host times). A block preceded by the line
# "<!-- transcript: not run -->" is shown to readers but not run (it needs a GPU, the network, or
# takes long). Exit status 0 only if every transcript matches; a mismatch prints a diff.
#
# Only Perl core modules: runs on plain Debian bookworm.
use strict;
use warnings;
use utf8;
use Cwd qw(abs_path);
use File::Basename qw(dirname);

binmode STDOUT, ':encoding(UTF-8)';
binmode STDERR, ':encoding(UTF-8)';

my $repo = abs_path(dirname(abs_path($0)) . '/..');
my $build = "$repo/build";
my @files;
while (@ARGV) {
  my $arg = shift @ARGV;
  if ($arg eq '--build-dir') { $build = abs_path(shift @ARGV) // die "transcripts: --build-dir needs a directory\n"; }
  elsif ($arg =~ /^-/) { die "transcripts: unknown option $arg\n"; }
  else { push @files, $arg; }
}
die "usage: perl scripts/transcripts.pl [--build-dir DIR] FILE.md...\n" unless @files;
my $fixtures = "$repo/tests/data/readme";

# Blocks of one file: [line number, [lines]] for each transcript that is run.
sub transcripts {
  my ($path) = @_;
  open my $in, '<:encoding(UTF-8)', $path or die "transcripts: cannot read $path: $!\n";
  my @lines = <$in>;
  chomp @lines;
  my (@blocks, $current, $skip);
  for my $i (0 .. $#lines) {
    my $line = $lines[$i];
    if (!$current && $line =~ /^```/) {
      $current = { line => $i + 1, lines => [], skip => ($i > 0 && $lines[$i - 1] =~ /<!-- transcript: not run -->/ ? 1 : 0) };
      next;
    }
    next unless $current;
    if ($line =~ /^```\s*$/) {
      push @blocks, $current if @{ $current->{lines} } && $current->{lines}[0] =~ /^\$ / && !$current->{skip};
      undef $current;
      next;
    }
    push @{ $current->{lines} }, $line;
  }
  return @blocks;
}

# Commands and their expected output: [[command, line number, [expected lines]]...]
sub commands {
  my ($block) = @_;
  my @out;
  my $number = $block->{line};
  for my $line (@{ $block->{lines} }) {
    ++$number;
    if ($line =~ /^\$ (.*)$/) { push @out, [$1, $number, []]; }
    else { push @{ $out[-1][2] }, $line; }
  }
  return @out;
}

sub run_command {
  my ($command) = @_;
  $command =~ s/^stratsim-view(?=\s|$)/$build\/stratsim-view/;
  $command =~ s/^stratsim(?=\s|$)/$build\/stratsim/;
  local $ENV{QT_QPA_PLATFORM} = 'offscreen';
  my $output = `cd '$fixtures' && timeout 120 sh -c '$command' 2>&1`;
  utf8::decode($output);
  my @lines = split /\n/, $output, -1;
  pop @lines if @lines && $lines[-1] eq '';
  return @lines;
}

sub line_matches {
  my ($expected, $actual) = @_;
  s/\s+$// for $expected, $actual;
  return $expected eq $actual unless index($expected, '…') >= 0;
  my $pattern = join '.*?', map { quotemeta } split /…/, $expected, -1;
  return $actual =~ /^$pattern$/;
}

my ($failed, $run) = (0, 0);
for my $file (@files) {
  my $path = -e $file ? abs_path($file) : "$repo/$file";  # relative to the working directory, else the repository
  my $count = 0;
  for my $block (transcripts($path)) {
    for my $command (commands($block)) {
      my ($text, $number, $expected) = @$command;
      my @actual = run_command($text);
      ++$run;
      ++$count;
      my $same = @actual == @$expected;
      for my $i (0 .. $#actual) { last unless $same; $same = line_matches($expected->[$i], $actual[$i]); }
      next if $same;
      ++$failed;
      print "FAIL $file:$number: \$ $text\n";
      my $n = @actual > @$expected ? @actual : @$expected;
      for my $i (0 .. $n - 1) {
        my ($e, $a) = ($expected->[$i], $actual[$i]);
        if (defined $e && defined $a && line_matches($e, $a)) { print "   $a\n"; next; }
        print "-  $e\n" if defined $e;
        print "+  $a\n" if defined $a;
      }
    }
  }
  print "transcripts: $file: $count command(s)\n";
}
print "transcripts: $run command(s) run, $failed differ from the documentation\n";
exit($failed ? 1 : 0);
