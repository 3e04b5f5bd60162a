/* table.c: SCHEDULES (schedule.h) as the tables tile IR and kernel IR read: each SchedKind's choose, print,
 * verify and materialise, and the order in which tile IR offers them to a loop nest. A file of its own so that
 * the schedules' shared builders (build.c) sit below the schedules, and this table above them. */
#include "schedules/schedule.h"

const Schedule schedules[SCHED_COUNT] = {
#define X(kind, p, choose, verify, rule) [kind] = {choose, p##_print, verify, p##_materialise, rule},
    SCHEDULES(X)
#undef X
};
const SchedKind schedule_order[SCHED_COUNT] = {
#define X(kind, p, choose, verify, rule) kind,
    SCHEDULES(X)
#undef X
};
