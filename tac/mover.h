/*
 * tac/mover.h - the NVM page mover (mover.c).
 */
#ifndef TAC_MOVER_H
#define TAC_MOVER_H

#include <stdbool.h>

bool tac_nvm_mover_init(void);
void tac_nvm_mover_free(void);
/* One round of the mover (evictor 0): the number of tuples moved, plus
 * one when a page was emptied. */
int tac_nvm_mover_step(void);
/* With an SSD: moves the coldest tuples of the NVM class (other than
 * need, 0 for none) holding the most pages down to SSD.  The number moved.
 * Evictor 0 only. */
int tac_nvm_spill(unsigned need);

#endif
