/*
 * mpi_perf: collective benchmarks over MPI on CPUs, printing exactly the table nccl-tests prints.
 *
 * gpufleet's local clusters have no GPU, so nccl-tests cannot run there. This program measures the same
 * collectives with MPI (Open MPI over TCP between podman nodes), takes the same flags, and prints the
 * same output format (size, count, type, redop, root; then time, algbw, busbw, #wrong for out-of-place
 * and in-place; "# Out of bounds values" and "# Avg bus bandwidth"), so that one parser and one gate
 * serve CPU and GPU runs. The binary is installed once and linked under each nccl-tests name
 * (all_reduce_perf, all_gather_perf, ...); the name it is called by picks the collective.
 *
 * Bus bandwidth uses nccl-tests' factors (doc/PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather,
 * reduce_scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1.
 * The time of an iteration is the slowest rank's mean over -n iterations, after -w warm-up iterations.
 * Every result is checked element by element (-c 1, the default); wrong elements are counted in #wrong.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MPI_PERF_VERSION "0.1.0"

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, REDUCE, SENDRECV, GATHER, SCATTER };

static const struct {
  const char *name;    /* binary name prefix, as nccl-tests names its binaries */
  enum coll coll;
  int has_op;          /* prints a redop */
  int has_root;        /* prints a root */
  int size_is_total;   /* printed size counts every rank's part (gather-like collectives) */
} COLLS[] = {
    {"all_reduce", ALL_REDUCE, 1, 0, 0}, {"all_gather", ALL_GATHER, 0, 0, 1},
    {"reduce_scatter", REDUCE_SCATTER, 1, 0, 1}, {"alltoall", ALLTOALL, 0, 0, 1},
    {"broadcast", BROADCAST, 0, 1, 0}, {"reduce", REDUCE, 1, 1, 0},
    {"sendrecv", SENDRECV, 0, 0, 0}, {"gather", GATHER, 0, 1, 1}, {"scatter", SCATTER, 0, 1, 1},
};

struct dtype { const char *name; MPI_Datatype mpi; size_t size; };
static const struct dtype DTYPES[] = {
    {"float", MPI_FLOAT, 4}, {"double", MPI_DOUBLE, 8}, {"int32", MPI_INT32_T, 4}, {"int64", MPI_INT64_T, 8},
};
struct op { const char *name; MPI_Op mpi; };
static const struct op OPS[] = {{"sum", MPI_SUM}, {"prod", MPI_PROD}, {"max", MPI_MAX}, {"min", MPI_MIN}};

static int rank, nranks;

static void die(const char *msg) {
  if (rank == 0) fprintf(stderr, "mpi_perf: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static size_t parse_size(const char *text) {
  char *end;
  double value = strtod(text, &end);
  if (end == text || value < 0) die("bad size; expected e.g. 8, 64K, 16M or 1G");
  switch (*end) {
    case 'K': case 'k': value *= 1024.0; break;
    case 'M': case 'm': value *= 1024.0 * 1024.0; break;
    case 'G': case 'g': value *= 1024.0 * 1024.0 * 1024.0; break;
    case '\0': break;
    default: die("bad size suffix; expected K, M or G");
  }
  return (size_t)value;
}

/* Values that every op keeps exact in float: small integers. */
static double value_at(int r, size_t i) { return (double)(((size_t)r * 7 + i) % 5 + 1); }

static void fill(void *buf, const struct dtype *t, size_t count, int r, size_t offset) {
  for (size_t i = 0; i < count; i++) {
    double v = value_at(r, offset + i);
    if (t->mpi == MPI_FLOAT) ((float *)buf)[i] = (float)v;
    else if (t->mpi == MPI_DOUBLE) ((double *)buf)[i] = v;
    else if (t->mpi == MPI_INT32_T) ((int32_t *)buf)[i] = (int32_t)v;
    else ((int64_t *)buf)[i] = (int64_t)v;
  }
}

static double get(const void *buf, const struct dtype *t, size_t i) {
  if (t->mpi == MPI_FLOAT) return ((const float *)buf)[i];
  if (t->mpi == MPI_DOUBLE) return ((const double *)buf)[i];
  if (t->mpi == MPI_INT32_T) return ((const int32_t *)buf)[i];
  return (double)((const int64_t *)buf)[i];
}

static double reduce_expected(const struct op *o, size_t i) {
  double acc = value_at(0, i);
  for (int r = 1; r < nranks; r++) {
    double v = value_at(r, i);
    if (o->mpi == MPI_SUM) acc += v;
    else if (o->mpi == MPI_PROD) acc *= v;
    else if (o->mpi == MPI_MAX) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  return acc;
}

static long count_wrong(const void *buf, const struct dtype *t, size_t count, double (*expect)(size_t, const void *),
                        const void *ctx) {
  long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    double want = expect(i, ctx), got = get(buf, t, i);
    double tolerance = t->mpi == MPI_FLOAT ? 1e-6 * (want < 0 ? -want : want) + 1e-6 : 1e-9;
    if (got - want > tolerance || want - got > tolerance) wrong++;
  }
  return wrong;
}

struct check_ctx { enum coll coll; const struct op *op; size_t count; int root; };

static double expect_at(size_t i, const void *vctx) {
  const struct check_ctx *c = vctx;
  switch (c->coll) {
    case ALL_REDUCE: return reduce_expected(c->op, i);
    case REDUCE: return reduce_expected(c->op, i);
    case REDUCE_SCATTER: return reduce_expected(c->op, (size_t)rank * c->count + i);
    case ALL_GATHER: case GATHER: return value_at((int)(i / c->count), i % c->count);
    case ALLTOALL: return value_at((int)(i / c->count), (size_t)rank * c->count + i % c->count);
    case BROADCAST: return value_at(c->root, i);
    case SCATTER: return value_at(c->root, (size_t)rank * c->count + i);
    case SENDRECV: return value_at((rank - 1 + nranks) % nranks, i);
  }
  return 0;
}

/* One timed call. in_place selects MPI_IN_PLACE (or the same buffer, where MPI has no in-place form). */
static void run_once(enum coll coll, int in_place, void *send, void *recv, size_t count, const struct dtype *t,
                     const struct op *o, int root) {
  int n = (int)count;
  size_t part = count * t->size;
  switch (coll) {
    case ALL_REDUCE:
      MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, n, t->mpi, o->mpi, MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, t->mpi, recv, n, t->mpi, MPI_COMM_WORLD);
      break;
    case REDUCE_SCATTER:
      if (in_place) MPI_Reduce_scatter_block(MPI_IN_PLACE, recv, n, t->mpi, o->mpi, MPI_COMM_WORLD);
      else MPI_Reduce_scatter_block(send, recv, n, t->mpi, o->mpi, MPI_COMM_WORLD);
      break;
    case ALLTOALL:
      MPI_Alltoall(in_place ? MPI_IN_PLACE : send, n, t->mpi, recv, n, t->mpi, MPI_COMM_WORLD);
      break;
    case BROADCAST:
      if (in_place) MPI_Bcast(recv, n, t->mpi, root, MPI_COMM_WORLD);
      else {
        if (rank == root) memcpy(recv, send, part);
        MPI_Bcast(recv, n, t->mpi, root, MPI_COMM_WORLD);
      }
      break;
    case REDUCE:
      MPI_Reduce(in_place && rank == root ? MPI_IN_PLACE : (in_place ? recv : send), recv, n, t->mpi, o->mpi, root,
                 MPI_COMM_WORLD);
      break;
    case SENDRECV: {
      int to = (rank + 1) % nranks, from = (rank - 1 + nranks) % nranks;
      if (in_place) MPI_Sendrecv_replace(recv, n, t->mpi, to, 0, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else MPI_Sendrecv(send, n, t->mpi, to, 0, recv, n, t->mpi, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
    }
    case GATHER:
      if (in_place && rank == root) MPI_Gather(MPI_IN_PLACE, n, t->mpi, recv, n, t->mpi, root, MPI_COMM_WORLD);
      else MPI_Gather(in_place ? (char *)recv + (size_t)rank * part : send, n, t->mpi, recv, n, t->mpi, root,
                      MPI_COMM_WORLD);
      break;
    case SCATTER:
      if (in_place && rank == root) MPI_Scatter(send, n, t->mpi, MPI_IN_PLACE, n, t->mpi, root, MPI_COMM_WORLD);
      else MPI_Scatter(send, n, t->mpi, recv, n, t->mpi, root, MPI_COMM_WORLD);
      break;
  }
}

/* Prepare buffers for one run: send holds this rank's data; recv holds what in-place expects. */
static void prepare(enum coll coll, int in_place, void *send, void *recv, size_t count, const struct dtype *t,
                    int root) {
  size_t part = count * t->size;
  switch (coll) {
    case ALL_REDUCE: case REDUCE: case BROADCAST: case SENDRECV:
      fill(send, t, count, rank, 0);
      if (in_place) fill(recv, t, count, rank, 0);
      break;
    case ALL_GATHER: case GATHER:
      fill(send, t, count, rank, 0);
      if (in_place) fill((char *)recv + (size_t)rank * part, t, count, rank, 0);
      break;
    case REDUCE_SCATTER: case ALLTOALL:
      fill(send, t, count * (size_t)nranks, rank, 0);
      if (in_place) fill(recv, t, count * (size_t)nranks, rank, 0);
      break;
    case SCATTER:
      fill(send, t, count * (size_t)nranks, root == rank ? rank : root, 0);
      if (in_place && rank == root) fill((char *)recv, t, count, rank, (size_t)rank * count);
      break;
  }
}

static double bus_factor(enum coll coll) {
  double n = nranks;
  switch (coll) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER: case REDUCE_SCATTER: case ALLTOALL: case GATHER: case SCATTER: return (n - 1) / n;
    default: return 1.0;
  }
}

static void format_time(char *out, double usec) {
  if (usec >= 100000.0) sprintf(out, "%7.0f", usec);
  else if (usec >= 10000.0) sprintf(out, "%7.1f", usec);
  else sprintf(out, "%7.2f", usec);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  int which = -1;
  for (size_t i = 0; i < sizeof COLLS / sizeof COLLS[0]; i++) {
    size_t len = strlen(COLLS[i].name);
    if (strncmp(base, COLLS[i].name, len) == 0 && strcmp(base + len, "_perf") == 0) which = (int)i;
  }
  size_t min_bytes = 32 * 1024 * 1024, max_bytes = 32 * 1024 * 1024, step_bytes = 1024 * 1024;
  int step_factor = 0, iters = 20, warmup = 5, check = 1, root = 0;
  const struct dtype *t = &DTYPES[0];
  const struct op *o = &OPS[0];
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:i:n:w:c:g:t:d:o:r:x:")) != -1) {
    switch (opt) {
      case 'b': min_bytes = parse_size(optarg); break;
      case 'e': max_bytes = parse_size(optarg); break;
      case 'f': step_factor = atoi(optarg); break;
      case 'i': step_bytes = parse_size(optarg); step_factor = 0; break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'g': if (atoi(optarg) != 1) die("-g: one rank per CPU process; use 1"); break;
      case 't': if (atoi(optarg) != 1) die("-t: one thread per process; use 1"); break;
      case 'd': {
        int found = 0;
        for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
          if (strcmp(optarg, DTYPES[i].name) == 0) { t = &DTYPES[i]; found = 1; }
        if (!found) die("-d: expected float, double, int32 or int64");
        break;
      }
      case 'o': {
        int found = 0;
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
          if (strcmp(optarg, OPS[i].name) == 0) { o = &OPS[i]; found = 1; }
        if (!found) die("-o: expected sum, prod, max or min");
        break;
      }
      case 'r': root = atoi(optarg); break;
      case 'x': which = -1;
        for (size_t i = 0; i < sizeof COLLS / sizeof COLLS[0]; i++)
          if (strcmp(optarg, COLLS[i].name) == 0) which = (int)i;
        break;
      default: die("usage: <collective>_perf [-b min] [-e max] [-f factor | -i step] [-n iters] [-w warmup] "
                   "[-c 0|1] [-d type] [-o op] [-r root]");
    }
  }
  if (which < 0) die("call me as all_reduce_perf, all_gather_perf, ... or pass -x <collective>");
  if (iters < 1 || warmup < 0 || min_bytes > max_bytes) die("bad -n, -w, -b or -e");
  if (root < 0 || root >= nranks) die("-r: root out of range");
  enum coll coll = COLLS[which].coll;

  char host[256];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  char *hosts = rank == 0 ? malloc((size_t)nranks * sizeof host) : NULL;
  int *pids = rank == 0 ? malloc((size_t)nranks * sizeof(int)) : NULL;
  int pid = (int)getpid();
  MPI_Gather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    char *newline = strchr(lib, '\n');
    if (newline) *newline = '\0';
    char *comma = strchr(lib, ',');
    if (comma) *comma = '\0';
    printf("# gpufleet mpi_perf %s (nccl-tests output format; CPU collectives over %s)\n", MPI_PERF_VERSION, lib);
    printf("# Collective test starting: %s_perf\n", COLLS[which].name);
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(%s) warmup iters: %d iters: %d agg iters: 1 "
           "validation: %d graph: 0\n",
           min_bytes, max_bytes, step_factor ? step_factor : (int)step_bytes, step_factor ? "factor" : "bytes",
           warmup, iters, check);
    printf("#\n# Using devices\n");
    for (int r = 0; r < nranks; r++)
      printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [0000:00:00] CPU\n", r, pids[r], hosts + (size_t)r * sizeof host);
    printf("#\n");
    printf("#                                                              out-of-place                       in-place          \n");
    printf("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n");
    fflush(stdout);
  }

  /* Buffers big enough for the largest size, with room for every rank's part. */
  size_t max_elems = max_bytes / t->size + (size_t)nranks;
  void *send = calloc(max_elems + 1, t->size), *recv = calloc(max_elems + 1, t->size);
  if (!send || !recv) die("out of memory for the buffers; lower -e");

  long total_wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes;) {
    size_t unit = t->size * (COLLS[which].size_is_total ? (size_t)nranks : 1);
    size_t count = bytes / unit; /* elements per rank (per rank's part for gather-like collectives) */
    size_t printed = count * unit;
    if (rank == 0) {
      printf("%12zu  %12zu  %8s  %6s  %6i", printed, count, t->name, COLLS[which].has_op ? o->name : "none",
             COLLS[which].has_root ? root : -1);
    }
    for (int in_place = 0; in_place <= 1; in_place++) {
      prepare(coll, in_place, send, recv, count, t, root);
      for (int i = 0; i < warmup; i++) run_once(coll, in_place, send, recv, count, t, o, root);
      prepare(coll, in_place, send, recv, count, t, root);
      run_once(coll, in_place, send, recv, count, t, o, root); /* the checked call */
      long wrong = 0;
      if (check) {
        struct check_ctx ctx = {coll, o, count, root};
        size_t n = count;
        if (coll == ALL_GATHER || coll == ALLTOALL) n = count * (size_t)nranks;
        if ((coll == GATHER && rank == root)) n = count * (size_t)nranks;
        int checks_here = !((coll == REDUCE || coll == GATHER) && rank != root);
        if (checks_here && n > 0) wrong = count_wrong(recv, t, n, expect_at, &ctx);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      for (int i = 0; i < iters; i++) run_once(coll, in_place, send, recv, count, t, o, root);
      double seconds = (MPI_Wtime() - start) / iters, slowest;
      MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      long wrong_all = 0;
      MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        double usec = slowest * 1e6;
        double algbw = slowest > 0 ? (double)printed / 1e9 / slowest : 0;
        double busbw = algbw * bus_factor(coll);
        char time_text[32], wrong_text[32];
        format_time(time_text, usec);
        if (check) sprintf(wrong_text, "%6ld", wrong_all); else sprintf(wrong_text, "%6s", "N/A");
        printf("  %7s  %6.2f  %6.2f  %6s", time_text, algbw, busbw, wrong_text);
        total_wrong += wrong_all;
        bw_sum += busbw;
        bw_count++;
      }
    }
    if (rank == 0) { printf("\n"); fflush(stdout); }
    size_t next = step_factor ? bytes * (size_t)step_factor : bytes + step_bytes;
    if (next <= bytes) break;
    bytes = next;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", bw_count ? bw_sum / bw_count : 0.0);
    printf("#\n# Collective test concluded: %s_perf\n#\n", COLLS[which].name);
    fflush(stdout);
  }
  free(send);
  free(recv);
  long failed = total_wrong;
  MPI_Bcast(&failed, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed ? 1 : 0;
}
