/*
 * test_hmm request numbers as Linux 5.10 to 5.13 defined them in lib/test_hmm_uapi.h:
 * READ, WRITE, MIGRATE and SNAPSHOT only (no exclusive access, no release).
 * struct hmm_dmirror_cmd is unchanged, so the pinned header supplies it.
 */
#include "test_hmm_uapi.h"

#undef HMM_DMIRROR_READ
#undef HMM_DMIRROR_WRITE
#undef HMM_DMIRROR_MIGRATE_TO_DEV
#undef HMM_DMIRROR_MIGRATE_TO_SYS
#undef HMM_DMIRROR_SNAPSHOT
#undef HMM_DMIRROR_EXCLUSIVE
#undef HMM_DMIRROR_CHECK_EXCLUSIVE
#undef HMM_DMIRROR_RELEASE

#define HMM_DMIRROR_READ		_IOWR('H', 0x00, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_WRITE		_IOWR('H', 0x01, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_MIGRATE		_IOWR('H', 0x02, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_SNAPSHOT		_IOWR('H', 0x03, struct hmm_dmirror_cmd)
