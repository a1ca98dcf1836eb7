"""The ids Slack sends back when a person acts: buttons' action ids, modals' callback
ids and the global shortcut's. Every one starts with ``trainbot_``, so the Slack app
answers them all with one listener each (:data:`ACTION_PREFIX`, :data:`VIEW_PREFIX`) and
the core tells them apart by these names. Constants only, no I/O.
"""

from __future__ import annotations

ACTION_PREFIX = "trainbot_"
ACTION_CANCEL = "trainbot_cancel"
ACTION_CANCEL_MEMBER = "trainbot_cancel_member"  # a sweep's parent: cancel one member
ACTION_LOGS = "trainbot_logs"
ACTION_ATTACH = "trainbot_attach"
ACTION_RETRY = "trainbot_retry"
ACTION_RESUME = "trainbot_resume"  # a run that stopped early: a new launch from its checkpoint
ACTION_USE_PARTITION = "trainbot_use_partition"
ACTION_APPROVE = "trainbot_approve"
ACTION_REJECT = "trainbot_reject"
ACTION_PREFS = "trainbot_prefs"  # App Home notification settings: trainbot_prefs_<which>
ACTION_NODE_DRAIN = "trainbot_node_drain"  # the node ledger: the value is "<cluster> <node>"
ACTION_NODE_RESUME = "trainbot_node_resume"
ACTION_RUN_AGAIN = "trainbot_run_again"  # value: the launch id; its request, once more
ACTION_EDIT_RELAUNCH = "trainbot_edit_relaunch"  # value: the launch id; a modal to edit it
# A modal's callback id: its submission comes to the core as Incoming(action_id=VIEW_...),
# the value of its one input in ``text`` and that input's block id in ``action_value``.
VIEW_PREFIX = "trainbot_view_"
VIEW_RELAUNCH = "trainbot_view_relaunch"  # Edit & relaunch: the input's block id is the launch
VIEW_NODE_DRAIN = "trainbot_view_node_drain"  # Drain's modal: block id "<cluster> <node>"
VIEW_LAUNCH = "trainbot_view_launch"  # the shortcut's form: its thread goes to the person's DM
SHORTCUT_LAUNCH = "trainbot_shortcut_launch"  # the global shortcut "Launch training"
ACTION_FORM_CHECK = "trainbot_form_check"  # the launch form's input, checked as it is typed
ACTION_TOKEN = "trainbot_token"  # App Home API tokens: trainbot_token_create, _revoke
ACTION_TOKEN_CREATE = "trainbot_token_create"  # value: the scopes, comma-separated
ACTION_TOKEN_REVOKE = "trainbot_token_revoke"  # value: the token id
ACTION_HELP = "trainbot_help"  # the help card's buttons: the value names the topic
ACTION_RECORD = "trainbot_record"  # value: the launch id; its run record in a modal
ACTION_EXPORT = "trainbot_export"  # value: the launch id; its newest checkpoint to HF format
ACTION_EVALUATE = "trainbot_evaluate"  # value: the launch id; a modal asking which tasks
VIEW_EVALUATE = "trainbot_view_evaluate"  # Evaluate's modal: the input's block id is the launch
ACTION_PRUNE = "trainbot_prune_"  # + K: delete all but the best K and the last; value: launch id
# /checkpoints, on one checkpoint; value: "<launch id>@<step>"
ACTION_CKPT_RESUME = "trainbot_ckpt_resume"  # its request again, from=<launch id>@<step>
ACTION_CKPT_NEW_RUN = "trainbot_ckpt_new_run"  # the launch form with from=<launch id>@<step>
ACTION_CKPT_EXPORT = "trainbot_ckpt_export"  # then=export of that checkpoint
