// ISA-L's igzip (Debian's libisal-dev): the publisher's deflate for the stored gzip copy of a snapshot.
#include <isa-l/igzip_lib.h>
#include <isa-l/crc.h>

// The level buffer sizes igzip suggests are macro expressions Swift cannot import.
static inline unsigned int ferry_isal_level_buffer_size(unsigned int level) {
    switch (level) {
    case 1: return ISAL_DEF_LVL1_DEFAULT;
    case 2: return ISAL_DEF_LVL2_DEFAULT;
    case 3: return ISAL_DEF_LVL3_DEFAULT;
    default: return 0;
    }
}
