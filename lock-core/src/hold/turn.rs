//! [`CommandTurn`]: the owner's turn to send a command about a hold, so that each command
//! carries the hold count the one before it left.

use std::sync::Arc;

use super::base::Hold;

/// The owner's turn to send a command about a hold; given back when dropped.
pub(crate) struct CommandTurn {
    hold: Arc<Hold>,
    owned: bool,
}

impl Hold {
    /// Takes the owner's turn to send a command about this hold.
    pub(crate) async fn command_turn(self: &Arc<Self>) -> CommandTurn {
        // The semaphore is never closed; if it were, going on unserialised beats hanging.
        let owned = match self.commands.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        CommandTurn {
            hold: self.clone(),
            owned,
        }
    }
}

impl Drop for CommandTurn {
    fn drop(&mut self) {
        if self.owned {
            self.hold.commands.add_permits(1);
        }
    }
}
