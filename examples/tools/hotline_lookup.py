#!/usr/bin/env python3
"""hotline_lookup.py - the hotline pipeline's tool stage: a stand-in for the
agency's knowledge base and account systems.

Called by the router without a shell:  hotline_lookup.py INTENT [CALLER_TEXT]
stdin:  the extract stage's JSON ({"topic": ..., "account": ..., ...}), or empty
stdout: one JSON object with the facts the composer may use ("facts": all
        of them as one sentence).
Deterministic on purpose: the same call gives the same answer (and cache key).

With CALLER_TEXT (configs/demo.yaml passes {{input}}) the facts come in the
caller's language - Chinese when the text holds CJK characters, else English -
and "reply_language" names it, so the composer's prompt can say which
language to answer in. Deciding that here, by a character test, is exact;
asking a 0.5B model to detect the language and then translate English facts
into Chinese was not (it answered Chinese callers in English).
"""
import json
import sys

FACTS = {
    "social_insurance": {
        "service": "Social insurance (社保) contribution records and pensions",
        "how": "Check contribution records in the 12333 app or at any social insurance office with your ID card; "
               "printouts are free.",
        "hotline": "12333", "hours": "Mon-Fri 8:30-17:30",
    },
    "housing_fund": {
        "service": "Housing provident fund (公积金) balance, withdrawal and loans",
        "how": "Withdrawals for rent or purchase are applied for in the housing fund app or at a service hall; "
               "bring your ID card and the contract. Money arrives in 3 working days.",
        "hotline": "12329", "hours": "Mon-Fri 9:00-17:00",
    },
    "household_registration": {
        "service": "Household registration (户口/户籍) transfers, ID cards and residence permits",
        "how": "Transfers and ID card renewals are handled at the local police station's household registration "
               "window; book a slot online first.",
        "hotline": "110 (non-emergency: 12345)", "hours": "Mon-Sat 9:00-17:00",
    },
    "medical_insurance": {
        "service": "Medical insurance (医保) reimbursement and cards",
        "how": "Hospital bills are settled directly with the medical insurance card; out-of-town claims are filed "
               "in the national medical insurance app within 6 months.",
        "hotline": "12393", "hours": "Mon-Fri 8:30-17:00",
    },
    "utilities_billing": {
        "service": "Water, electricity and gas bills (水电燃气费)",
        "how": "Disputed readings are rechecked for free within 5 working days; report the meter number. "
               "Bills can be paid in the utility's app or at a bank.",
        "hotline": "95598 (power), 96116 (water)", "hours": "24 hours",
    },
}


# The same facts in Chinese, for Chinese-speaking callers.
FACTS_ZH = {
    "social_insurance": {
        "service": "社保缴费记录与养老金",
        "how": "凭身份证在12333 App或任何社保经办窗口查询缴费记录，打印免费。",
        "hotline": "12333", "hours": "周一至周五 8:30-17:30",
    },
    "housing_fund": {
        "service": "住房公积金余额、提取与贷款",
        "how": "租房或购房提取公积金，在公积金App或服务大厅申请，带上身份证和合同，3个工作日到账。",
        "hotline": "12329", "hours": "周一至周五 9:00-17:00",
    },
    "household_registration": {
        "service": "户口迁移、身份证与居住证",
        "how": "户口迁移和身份证换领在当地派出所户籍窗口办理，请先在网上预约。",
        "hotline": "110（非紧急：12345）", "hours": "周一至周六 9:00-17:00",
    },
    "medical_insurance": {
        "service": "医保报销与医保卡",
        "how": "住院费用用医保卡直接结算；异地就医在6个月内通过国家医保App申请报销。",
        "hotline": "12393", "hours": "周一至周五 8:30-17:00",
    },
    "utilities_billing": {
        "service": "水费、电费、燃气费",
        "how": "对抄表读数有异议的，5个工作日内免费复核，请报上表号。费用可在缴费App或银行缴纳。",
        "hotline": "95598（电）、96116（水）", "hours": "24小时",
    },
}


def is_chinese(text):
    """True when text holds a CJK ideograph (the caller speaks Chinese)."""
    return any("\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" for ch in text)


# A call this line does not handle: said so politely, and what it does handle.
REFUSAL = ("Sorry, this line cannot help with that. We handle social insurance, the housing fund, "
           "household registration, medical insurance, utility bills and complaints.")
REFUSAL_ZH = "抱歉，本热线无法帮您办理这件事。我们受理社保、公积金、户口户籍、医保、水电燃气费和投诉。"


def main():
    intent = sys.argv[1] if len(sys.argv) > 1 else ""
    caller = sys.argv[2] if len(sys.argv) > 2 else None
    chinese = caller is not None and is_chinese(caller)
    raw = sys.stdin.read().strip()
    try:
        request = json.loads(raw) if raw else {}
    except ValueError:
        request = {}
    facts = (FACTS_ZH if chinese else FACTS).get(intent)
    language = {"reply_language": "Chinese" if chinese else "English"} if caller is not None else {}
    if intent == "out_of_scope":
        print(json.dumps({"intent": intent, "found": False, "refusal": REFUSAL_ZH if chinese else REFUSAL,
                          **language}, ensure_ascii=False))
        return 0
    if facts is None:
        print(json.dumps({"intent": intent, "found": False, "how": "Transfer the caller to a human agent.",
                          **language}, ensure_ascii=False))
        return 0
    out = {"intent": intent, "found": True, **facts, **language}
    # The facts as one sentence in the caller's language, for prompts.
    out["facts"] = (f"{facts['how']}热线 {facts['hotline']}，{facts['hours']}。" if chinese
                    else f"{facts['how']} Hotline {facts['hotline']}, {facts['hours']}.")
    account = request.get("account") if isinstance(request, dict) else None
    if account:
        out["account"] = str(account)
        out["account_status"] = "记录已找到，3天前更新" if chinese else "record found; last update 3 days ago"
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
